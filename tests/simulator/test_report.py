"""The plots ``htda simulate --out`` writes: every policy tellable from every other."""

from __future__ import annotations

import pytest

from htda.simulator.generator import AnalysisWorkload
from htda.simulator.report import plot_over_time, plot_sweep
from htda.simulator.run import AUTO, RunSpec, simulate

plt = pytest.importorskip("matplotlib.pyplot")  # (the plots' extra; the tests install it)


def test_every_line_of_the_plots_has_its_own_look(tmp_path, monkeypatch):
    """Thirteen policies and two bounds: the default colour cycle has ten colours, so LRU and the eleventh policy
    were drawn alike."""
    workload = AnalysisWorkload(requests=3000, seed=2)
    spec = RunSpec(capacities=[workload.footprint_bytes() // 20, workload.footprint_bytes() // 5],
                   half_lives=[AUTO, 300.0, 3600.0, 86400.0], admissions=["none", "tinylfu"],
                   baselines=["lru", "lfu", "arc", "s3fifo", "wtinylfu"])
    result = simulate(workload.chunks(), spec)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_sweep(result, tmp_path / "sweep.png", workload.footprint_bytes())
    plot_over_time(result, spec.capacities[0], tmp_path / "time.png")
    for axes in [*figures[0].axes, figures[1].axes[0]]:
        looks = {line.get_label(): (line.get_color(), line.get_linestyle(), line.get_marker())
                 for line in axes.get_lines()}
        assert len(looks) == 5 + 8 + 2  # baselines, htda at four half-lives with and without the filter, bounds
        assert len(set(looks.values())) == len(looks)
    sweep = {line.get_label(): line.get_color() for line in figures[0].axes[0].get_lines()}
    over_time = {line.get_label(): line.get_color() for line in figures[1].axes[0].get_lines()}
    assert sweep == over_time  # a policy keeps its colour from one plot to the other
