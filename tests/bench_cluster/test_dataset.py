"""The dataset writer: NanoAOD-like branches, sizes within the asked range, reuse between runs."""

from __future__ import annotations

import awkward as ak
import pytest
import uproot

from bench.cluster.dataset import DatasetSpec, ensure_dataset


def test_file_sizes_follow_the_spec():
    spec = DatasetSpec(total_mb=1000, min_file_mb=20, max_file_mb=200, seed=3)
    sizes = spec.file_sizes_mb()
    assert sum(sizes) >= 1000 and sum(sizes[:-1]) < 1000
    assert all(20 <= s <= 200 for s in sizes)
    assert sizes == DatasetSpec(total_mb=1000, min_file_mb=20, max_file_mb=200, seed=3).file_sizes_mb()


@pytest.mark.parametrize("kwargs", [{"min_file_mb": 0}, {"min_file_mb": 50, "max_file_mb": 10},
                                    {"compression": "gzip:1"}, {"compression": "zlib"}, {"total_mb": 1}])
def test_bad_specs_are_refused(kwargs):
    with pytest.raises(ValueError):
        DatasetSpec(**kwargs)


def test_writes_nanoaod_like_files_once(tmp_path):
    spec = DatasetSpec(total_mb=3, min_file_mb=1, max_file_mb=2, seed=7, compression="zlib:1")
    files = ensure_dataset(tmp_path, spec, log=lambda _: None)
    assert len(files) >= 2 and all(f.lfn.startswith("/store/") for f in files)
    with uproot.open(files[0].path) as f:
        tree = f["Events"]
        assert {"nMuon", "Muon_pt", "Muon_eta", "Muon_phi", "Muon_charge", "nJet", "Jet_pt", "Jet_eta",
                "MET_pt"} <= set(tree.keys())
        arrays = tree.arrays(["nMuon", "Muon_pt", "nJet", "Jet_pt"])
    assert tree.num_entries == files[0].events
    assert ak.all(ak.num(arrays["Muon_pt"]) == arrays["nMuon"])
    assert ak.all(ak.num(arrays["Jet_pt"]) == arrays["nJet"])
    mtimes = [tmp_path.joinpath(f.path).stat().st_mtime_ns for f in files]
    again = ensure_dataset(tmp_path, spec, log=pytest.fail)  # same spec: nothing is written
    assert again == files and [tmp_path.joinpath(f.path).stat().st_mtime_ns for f in files] == mtimes
    with uproot.open(files[0].path) as f:
        before = f["Events"]["MET_pt"].array()[:10]
    other = ensure_dataset(tmp_path, DatasetSpec(total_mb=3, min_file_mb=1, max_file_mb=2, seed=8), log=lambda _: None)
    with uproot.open(other[0].path) as f:  # another seed: rewritten with other contents
        assert not ak.all(f["Events"]["MET_pt"].array()[:10] == before)
