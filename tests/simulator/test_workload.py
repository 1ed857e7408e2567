"""On the synthetic analysis workload HTDA's policy beats LRU and LFU on byte hit ratio at every cache size
from 5 % to 50 % of the working set (small scale; bench/simulator_bench.py prints the full table)."""

from __future__ import annotations

import pytest

from htda.simulator.generator import AnalysisWorkload
from htda.simulator.run import RunSpec, simulate

FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.5)


def test_htda_beats_lru_and_lfu_on_byte_hit_ratio():
    workload = AnalysisWorkload(requests=60_000, seed=11)
    working_set = workload.working_set_bytes()
    spec = RunSpec(capacities=[int(f * working_set) for f in FRACTIONS], half_lives=[300.0],
                   baselines=["lru", "lfu"], belady=False)
    result = simulate(workload.chunks(), spec)
    table = {(r.label, r.capacity): result.byte_hit_ratio(r) for r in result.results}
    for capacity in spec.capacities:
        htda, bound = table["htda(5m)", capacity], table["pfoo-l", capacity]
        assert htda > table["lru", capacity], capacity
        assert htda > table["lfu", capacity], capacity
        assert htda <= bound  # and the gap to the bound is what the bench reports


@pytest.mark.parametrize("field, value", [("zipf", float("nan")), ("zipf", -1.0), ("seed", -1), ("requests", -1),
                                          ("turnover", 0)])
def test_a_workload_out_of_its_range_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        AnalysisWorkload(**{field: value})
