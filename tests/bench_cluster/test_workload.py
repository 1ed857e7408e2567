"""The workload: same jobs for the same parameters, popularity skew, passes."""

from __future__ import annotations

import collections

import pytest

from bench.cluster.dataset import DatasetFile
from bench.cluster.workload import WorkloadSpec, make_jobs

FILES = [DatasetFile(f"/store/f{i:02d}.root", "", 1000 + i, 10) for i in range(30)]


def test_same_parameters_same_jobs_in_the_same_order():
    spec = WorkloadSpec(passes=3, jobs_per_pass=10)
    assert make_jobs(FILES, spec) == make_jobs(FILES, spec)
    assert make_jobs(FILES, spec) != make_jobs(FILES, WorkloadSpec(passes=3, jobs_per_pass=10, seed=8))


def test_passes_group_sizes_and_ids():
    jobs = make_jobs(FILES, WorkloadSpec(passes=3, jobs_per_pass=5, files_per_job=4))
    assert [j.pass_no for j in jobs] == [1] * 5 + [2] * 5 + [3] * 5
    assert len({j.job_id for j in jobs}) == 15
    assert all(1 <= len(j.inputs) <= 4 and set(j.sizes) == set(j.inputs) for j in jobs)
    assert all(j.sizes[lfn] == 1000 + int(lfn[8:10]) for j in jobs for lfn in j.inputs)


def test_popularity_is_skewed():
    skewed = collections.Counter(j.inputs for j in make_jobs(FILES, WorkloadSpec(passes=20, jobs_per_pass=50,
                                                                                 skew=1.2)))
    flat = collections.Counter(j.inputs for j in make_jobs(FILES, WorkloadSpec(passes=20, jobs_per_pass=50, skew=0)))
    assert skewed.most_common(1)[0][1] > 3 * flat.most_common(1)[0][1] / 2
    assert skewed.most_common(1)[0][1] > 5 * skewed.most_common()[-1][1]


@pytest.mark.parametrize("kwargs", [{"passes": 0}, {"jobs_per_pass": 0}, {"files_per_job": 0}, {"skew": -1}])
def test_bad_workloads_are_refused(kwargs):
    with pytest.raises(ValueError):
        WorkloadSpec(**kwargs)
