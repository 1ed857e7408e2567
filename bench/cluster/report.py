"""Figures of a run: the results table, the correctness check, and PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import statistics
from pathlib import Path

__all__ = ["summarize", "correctness", "placement", "table", "daemon_table", "plot", "later_passes", "rate_series"]

MB = 1e6


def later_passes(passes: int) -> list[int]:
    """The passes the headline rate is taken over: the second half (pass 2 of 2, passes 3-4 of 4, ...)."""
    return list(range(passes // 2 + 1, passes + 1)) if passes > 1 else [1]


def _rate(jobs: list[dict], span: tuple[float, float] | None = None) -> float:
    """Aggregate input rate: bytes the jobs read / the time from the first start to the last end."""
    if not jobs:
        return 0.0
    start, end = span or (min(j["start"] for j in jobs), max(j["end"] for j in jobs))
    return sum(j["bytes"] for j in jobs) / max(end - start, 1e-9)


def summarize(mode: dict, passes: int) -> dict:
    """One mode's row: rates, walltimes, hit ratio, storage-link bytes."""
    jobs = mode["jobs"]
    later = later_passes(passes)
    late_jobs = [j for j in jobs if j["pass"] in later]
    spans = {int(k): v for k, v in mode["pass_times"].items()}  # JSON makes the keys strings
    late_span = (min(spans[p][0] for p in later), max(spans[p][1] for p in later)) if later else None
    walls = sorted(j["end"] - j["start"] for j in jobs)
    read = sum(j["bytes"] for j in jobs)
    if mode["mode"] == "htda":
        # bytes of inputs on the worker's own cache device at job start, of all input bytes
        hit = sum(j["cached_bytes"] for j in jobs) / max(sum(j["input_bytes"] for j in jobs), 1)
    elif mode["mode"] == "xcache":
        hit = max(0.0, 1.0 - mode["link_bytes"] / max(read, 1))  # what the proxy did not fetch from storage
    else:
        hit = 0.0
    return {
        "mode": mode["mode"], "jobs": len(jobs), "read_gb": read / 1e9,
        "seconds": mode["ended"] - mode["started"],
        "rate_all": _rate(jobs, (min(s[0] for s in spans.values()), max(s[1] for s in spans.values()))) / MB,
        "rate_later": _rate(late_jobs, late_span) / MB,
        "rate_by_pass": {p: _rate([j for j in jobs if j["pass"] == p], spans[p]) / MB for p in sorted(spans)},
        "job_rate_later": statistics.median(j["bytes"] / max(j["end"] - j["start"], 1e-9) for j in late_jobs) / MB
        if late_jobs else 0.0,
        "wall_median": statistics.median(walls), "wall_p90": walls[int(0.9 * (len(walls) - 1))],
        "hit_ratio": hit, "link_gb": mode["link_bytes"] / 1e9,
        "on_preferred": sum(1 for j in jobs if j["worker"] in j.get("preferred", [])),
        "steered": sum(1 for j in jobs if j.get("preferred")),
    }


def correctness(results: dict) -> tuple[int, int, list[str]]:
    """(jobs identical in every mode, jobs, ids that differ): histograms hashed per job."""
    modes = list(results["modes"].values())
    by_mode = [{j["job"]: j["hash"] for j in m["jobs"]} for m in modes]
    ids = sorted(set().union(*by_mode))
    bad = [i for i in ids if len({m.get(i) for m in by_mode}) != 1]
    return len(ids) - len(bad), len(ids), bad


def placement(results: dict) -> str:
    """One line: what placed the jobs of each mode (real HTCondor with its intervals, or the stand-in)."""
    said = []
    for mode in results["modes"].values():
        p = mode.get("placement") or {"negotiator": "standin"}
        if p.get("negotiator") == "condor":
            text = (f"{p.get('version', 'HTCondor')}, NEGOTIATOR_INTERVAL {p.get('negotiator_interval')} s, "
                    f"JOB_ROUTER_POLLING_PERIOD {p.get('router_polling_period')} s")
        else:
            text = "the stand-in negotiator (bench/cluster/negotiator.py)"
        said.append(f"{mode['mode']}: {text}")
    return "; ".join(said)


def table(results: dict) -> str:
    """The results table (reStructuredText simple table)."""
    passes = int(results["config"]["workload"]["passes"])
    rows = [summarize(m, passes) for m in results["modes"].values()]
    base = next((r for r in rows if r["mode"] == "nocache"), None)
    head = ["mode", "jobs", "GB read", "run s", "MB/s all", "MB/s later", "x no-cache", "job MB/s later",
            "wall med s", "wall p90 s", "hit ratio", "storage GB"]
    lines = []
    for r in rows:
        ratio = f"{r['rate_later'] / base['rate_later']:.2f}" if base and base["rate_later"] else "-"
        lines.append([r["mode"], str(r["jobs"]), f"{r['read_gb']:.2f}", f"{r['seconds']:.0f}",
                      f"{r['rate_all']:.1f}", f"{r['rate_later']:.1f}", ratio, f"{r['job_rate_later']:.1f}",
                      f"{r['wall_median']:.1f}", f"{r['wall_p90']:.1f}", f"{r['hit_ratio']:.2f}",
                      f"{r['link_gb']:.2f}"])
    return _rst([head, *lines])


def pass_table(results: dict) -> str:
    passes = int(results["config"]["workload"]["passes"])
    rows = [summarize(m, passes) for m in results["modes"].values()]
    head = ["mode"] + [f"pass {p} MB/s" for p in range(1, passes + 1)]
    return _rst([head, *[[r["mode"]] + [f"{r['rate_by_pass'][p]:.1f}" for p in sorted(r["rate_by_pass"])]
                         for r in rows]])


def daemon_table(results: dict) -> str:
    """CPU (% of one core, averaged over the run) and RSS of HTDA's daemons and the caching servers."""
    rows = [["mode", "process", "CPU % core", "RSS mean MB", "RSS peak MB"]]
    for mode in results["modes"].values():
        for name, s in sorted(mode["daemons"].items()):
            if mode["mode"] == "htda" or name == "xcache":
                rows.append([mode["mode"], name, f"{100 * s['cpu']:.1f}", f"{s['rss_mean'] / MB:.0f}",
                             f"{s['rss_peak'] / MB:.0f}"])
    return _rst(rows)


def _rst(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rule = "  ".join("=" * w for w in widths)
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
    return "\n".join([rule, fmt(rows[0]), rule, *map(fmt, rows[1:]), rule])


def rate_series(jobs: list[dict], t0: float, step: float = 5.0) -> tuple[list[float], list[float]]:
    """Aggregate input rate over time: each job's bytes spread evenly over its walltime, in ``step`` bins."""
    if not jobs:
        return [], []
    end = max(j["end"] for j in jobs) - t0
    bins = [0.0] * (int(end // step) + 1)
    for j in jobs:
        a, b = j["start"] - t0, j["end"] - t0
        rate = j["bytes"] / max(b - a, 1e-9)
        for i in range(int(a // step), int(b // step) + 1):
            overlap = min(b, (i + 1) * step) - max(a, i * step)
            if overlap > 0:
                bins[i] += rate * overlap / step
    return [i * step for i in range(len(bins))], [v / MB for v in bins]


def plot(results: dict, outdir: Path) -> list[Path]:
    """input_rate.png, walltime.png, storage_link.png under ``outdir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    modes = list(results["modes"].values())
    paths = []

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for m in modes:
        x, y = rate_series(m["jobs"], m["started"])
        ax.plot(x, y, label=m["mode"])
    ax.set(xlabel="seconds since the mode started", ylabel="aggregate input rate (MB/s)",
           title="Jobs' aggregate input rate")
    ax.legend()
    paths.append(_save(fig, outdir / "input_rate.png"))

    passes = int(results["config"]["workload"]["passes"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(modes)
    for k, m in enumerate(modes):
        data = [[j["end"] - j["start"] for j in m["jobs"] if j["pass"] == p] for p in range(1, passes + 1)]
        ax.boxplot(data, positions=[p + (k - (len(modes) - 1) / 2) * width for p in range(1, passes + 1)],
                   widths=width * 0.9, patch_artist=True, boxprops={"facecolor": f"C{k}"}, manage_ticks=False)
        ax.plot([], [], color=f"C{k}", linewidth=8, label=m["mode"])
    ax.set_xticks(range(1, passes + 1))
    ax.set(xlabel="pass", ylabel="job walltime (s)", title="Job walltime per pass")
    ax.legend()
    paths.append(_save(fig, outdir / "walltime.png"))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for m in modes:
        s = m["link_samples"]
        x = [b[0] - m["started"] for b in s[1:]]
        y = [((b[1] + b[2]) - (a[1] + a[2])) / max(b[0] - a[0], 1e-9) / MB for a, b in zip(s, s[1:])]
        ax.plot(x, y, label=m["mode"])
    ax.set(xlabel="seconds since the mode started", ylabel="storage link (MB/s)", title="Bytes over the storage link")
    ax.legend()
    paths.append(_save(fig, outdir / "storage_link.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
