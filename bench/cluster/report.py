"""Figures of a run: the results table, the correctness check, and PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

__all__ = ["summarize", "correctness", "HitCheck", "hit_check", "placement", "table", "ratios", "ratio_rows", "spread",
           "daemon_table", "plot", "later_passes", "rate_series", "cold_floor", "link_rate", "new_input_bytes",
           "pass_spans"]

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


def pass_spans(mode: dict) -> dict[int, tuple[float, float]]:
    """(start, end) of each pass by number: a run's own results have int keys, a results.json read back
    string keys."""
    return {int(k): v for k, v in mode["pass_times"].items()}


def summarize(mode: dict, passes: int) -> dict:
    """One mode's row: rates, walltimes, hit ratio, storage-link bytes."""
    jobs = mode["jobs"]
    later = later_passes(passes)
    late_jobs = [j for j in jobs if j["pass"] in later]
    spans = pass_spans(mode)
    late_span = (min(spans[p][0] for p in later), max(spans[p][1] for p in later)) if later else None
    walls = sorted(j["end"] - j["start"] for j in jobs)
    read = sum(j["bytes"] for j in jobs)
    if mode["mode"] == "htda":
        # bytes of inputs on the worker's own cache device at job start, of all input bytes
        hit = sum(j["cached_bytes"] for j in jobs) / max(sum(j["input_bytes"] for j in jobs), 1)
    elif mode["mode"] == "xcache":
        hit = max(0.0, 1.0 - mode["link_bytes"] / max(read, 1))  # what the proxy did not fetch from storage
    elif mode["mode"] == "ideal":
        hit = 1.0  # every input on the worker's own disk
    else:
        hit = 0.0
    return {
        "mode": mode["mode"], "jobs": len(jobs), "read_gb": read / 1e9,
        "seconds": mode["ended"] - mode["started"],
        "rate_all": _rate(jobs, (min(s[0] for s in spans.values()), max(s[1] for s in spans.values()))) / MB,
        "rate_later": _rate(late_jobs, late_span) / MB,
        "rate_by_pass": {p: _rate([j for j in jobs if j["pass"] == p], spans[p]) / MB for p in sorted(spans)},
        "link_gb_by_pass": {p: b / 1e9 for p, b in link_bytes_by_pass(mode["link_samples"], spans).items()},
        "job_rate_later": statistics.median(j["bytes"] / max(j["end"] - j["start"], 1e-9) for j in late_jobs) / MB
        if late_jobs else 0.0,
        "wall_median": statistics.median(walls), "wall_p90": walls[int(0.9 * (len(walls) - 1))],
        "hit_ratio": hit, "link_gb": mode["link_bytes"] / 1e9,
        "on_preferred": sum(1 for j in jobs if j["worker"] in j.get("preferred", [])),
        "steered": sum(1 for j in jobs if j.get("preferred")),
        "cache_disk": mode.get("cache_disk") or {},
    }


def link_bytes_by_pass(samples: list, spans: dict[int, tuple[float, float]]) -> dict[int, int]:
    """Storage-link bytes (both ways) from each pass's start to the next one's (the last: to the end of the
    samples), so that copies made in the pause after a pass count with it."""
    if not samples:
        return {p: 0 for p in spans}
    starts = sorted((t0, p) for p, (t0, _) in spans.items())

    def at(t: float) -> int:  # the cumulative count of the last sample at or before t (the first, before it)
        before = [tx + rx for when, tx, rx in samples if when <= t]
        return before[-1] if before else samples[0][1] + samples[0][2]

    out = {}
    for i, (t0, p) in enumerate(starts):
        t1 = starts[i + 1][0] if i + 1 < len(starts) else samples[-1][0]
        out[p] = at(t1) - at(t0)
    return out


def correctness(results: dict) -> tuple[int, int, list[str]]:
    """(jobs identical in every mode, jobs, ids that differ): histograms hashed per job."""
    modes = list(results["modes"].values())
    by_mode = [{j["job"]: j["hash"] for j in m["jobs"]} for m in modes]
    ids = sorted(set().union(*by_mode))
    bad = [i for i in ids if len({m.get(i) for m in by_mode}) != 1]
    return len(ids) - len(bad), len(ids), bad


@dataclass
class HitCheck:
    """The cache nodes' hit metric against what the jobs saw: ``truth`` and ``metric`` are the shares of opened
    bytes read from copies; ``problems`` says where they part (per worker)."""

    truth: float
    metric: float
    ok: bool
    problems: list[str]


def hit_check(mode: dict, tolerance: float = 0.02) -> HitCheck | None:
    """Check the nodes' open counters against the jobs' own record (None when the jobs recorded nothing: the
    stand-in's runs).

    Per worker, the node must count as many opens as its jobs made (a missed or extra open is a bug).  Each
    side classifies an open at a slightly different instant (the job just before opening, the node when it
    reads the event), so a copy landing in between may flip one open: the byte shares must agree within
    ``tolerance`` of the jobs' share, or no more than ``max(1, tolerance * opens)`` opens be classified apart."""
    jobs = [j for j in mode["jobs"] if j.get("opened")]
    counted = mode.get("open_counters") or {}
    if not jobs or not counted:
        return None
    problems, flipped, opens = [], 0, 0
    for worker, c in sorted(counted.items()):
        if "error" in c:
            problems.append(f"{worker}: {c['error']}")
            continue
        seen = [f for j in jobs if j.get("worker", worker) == worker for f in j["opened"]]
        node = c.get("opens", {})
        if len(seen) != int(sum(node.values())):
            problems.append(f"{worker}: the jobs opened {len(seen)} files, the node counted {int(sum(node.values()))}")
        cached = sum(f["from"] == "cache" for f in seen)
        if cached != int(node.get("cache", 0)):
            flipped += abs(cached - int(node.get("cache", 0)))
        opens += len(seen)
    opened = [f for j in jobs for f in j["opened"]]
    truth = sum(f["size"] for f in opened if f["from"] == "cache") / max(sum(f["size"] for f in opened), 1)
    by_source: dict[str, float] = {}
    for c in counted.values():
        for source, value in c.get("bytes", {}).items():
            by_source[source] = by_source.get(source, 0.0) + value
    metric = by_source.get("cache", 0.0) / max(sum(by_source.values()), 1)
    close = abs(metric - truth) <= tolerance * truth if truth else metric == 0.0
    ok = not problems and (close or flipped <= max(1, tolerance * opens))
    if flipped:
        problems.append(f"{flipped} of {opens} opens classified apart (a copy landed as the file was opened)")
    return HitCheck(truth, metric, ok, problems)


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
    """The results table (reStructuredText simple table): what a site compares first (the whole run's
    makespan, the first pass over new data), then the later passes, the slow tail and the costs."""
    passes = int(results["config"]["workload"]["passes"])
    rows = [summarize(m, passes) for m in results["modes"].values()]
    head = ["mode", "makespan s", "pass 1 MB/s", "later MB/s", "wall p90 s", "wall med s", "storage GB",
            "hit ratio", "job MB/s later", "GB read", "jobs", "cache disk GB"]
    lines = [[r["mode"], f"{r['seconds']:.0f}", f"{r['rate_by_pass'][1]:.1f}", f"{r['rate_later']:.1f}",
              f"{r['wall_p90']:.1f}", f"{r['wall_median']:.1f}", f"{r['link_gb']:.2f}", f"{r['hit_ratio']:.2f}",
              f"{r['job_rate_later']:.1f}", f"{r['read_gb']:.2f}", str(r["jobs"]), _disk(r["cache_disk"])]
             for r in rows]
    return _rst([head, *lines])


def _disk(areas: dict[str, int]) -> str:
    """A mode's cache disk at its end: the total, and each area where there are several (HTDA's devices and its
    read-through caches); "-" where no cache area was measured (no cache, or a run from before it was)."""
    if not areas:
        return "-"
    total = f"{sum(areas.values()) / 1e9:.2f}"
    return total if len(areas) == 1 else f"{total} ({' + '.join(f'{b / 1e9:.2f}' for b in areas.values())})"


#: HTDA against the other modes: (figure, summary key, the mode it is divided by, better when, goal)
COMPARISONS = [
    ("makespan", "seconds", "xcache", "lower", 0.85),
    ("pass 1 rate", "pass1", "nocache", "higher", 0.95),
    ("storage bytes", "link_gb", "xcache", "lower", 1.2),
    ("job walltime p90", "wall_p90", "xcache", "lower", 1.0),
    ("later passes rate", "rate_later", "xcache", "higher", 1.2),
    ("later passes rate", "rate_later", "ideal", "higher", 0.8),
    ("later passes rate", "rate_later", "nocache", "higher", None),
]


def ratio_rows(results: dict, mode: str = "htda") -> list[tuple[str, str, float, str | None, bool | None]]:
    """``mode``'s figures as ratios to the other modes': (figure, "mode / other", ratio, goal or None,
    met or None), favourable and unfavourable alike."""
    passes = int(results["config"]["workload"]["passes"])
    rows = {r["mode"]: {**r, "pass1": r["rate_by_pass"][1]}
            for r in (summarize(m, passes) for m in results["modes"].values())}
    out: list[tuple[str, str, float, str | None, bool | None]] = []
    if mode not in rows:
        return out
    for figure, key, other, better, goal in COMPARISONS:
        if other not in rows or not rows[other][key]:
            continue
        ratio = rows[mode][key] / rows[other][key]
        out.append((figure, f"{mode} / {other}", ratio, *_goal(ratio, better, goal)))
    return out


def _goal(ratio: float, better: str, goal: float | None) -> tuple[str | None, bool | None]:
    if goal is None:
        return None, None
    return f"{'<=' if better == 'lower' else '>='} {goal}", ratio <= goal if better == "lower" else ratio >= goal


def _met(met: bool | None) -> str:
    return "-" if met is None else ("yes" if met else "NO")


def ratios(results: dict, mode: str = "htda") -> str:
    """:func:`ratio_rows` as a table, each ratio beside its goal."""
    lines = [[figure, versus, f"{ratio:.2f}", goal or "-", _met(met)]
             for figure, versus, ratio, goal, met in ratio_rows(results, mode)]
    return _rst([["figure", "htda / other", "ratio", "goal", "met"], *lines]) if lines else ""


def spread(runs: list[dict]) -> str:
    """Several runs of the same configuration: per mode the median and the range of the headline figures,
    then HTDA's ratios (medians of the per-run ratios) beside their goals."""
    figures = [("seconds", "makespan s", "{:.0f}"), ("pass1", "pass 1 MB/s", "{:.1f}"),
               ("rate_later", "later MB/s", "{:.1f}"), ("wall_p90", "wall p90 s", "{:.1f}"),
               ("link_gb", "storage GB", "{:.2f}"), ("hit_ratio", "hit ratio", "{:.2f}")]
    by_mode: dict[str, list[dict]] = {}
    for results in runs:
        passes = int(results["config"]["workload"]["passes"])
        for m in results["modes"].values():
            row = summarize(m, passes)
            by_mode.setdefault(m["mode"], []).append({**row, "pass1": row["rate_by_pass"][1]})
    head = ["mode", "runs", *(f"{label} median (range)" for _, label, _ in figures)]
    lines = []
    for mode, rows in by_mode.items():
        cells = []
        for key, _, fmt in figures:
            values = [r[key] for r in rows]
            cells.append(f"{fmt.format(statistics.median(values))} "
                         f"({fmt.format(min(values))}-{fmt.format(max(values))})")
        lines.append([mode, str(len(rows)), *cells])
    per_run: dict[tuple[str, str], list[float]] = {}
    for results in runs:
        for figure, versus, ratio, _, _ in ratio_rows(results):
            per_run.setdefault((figure, versus), []).append(ratio)
    goals = {(figure, f"htda / {other}"): (better, goal) for figure, _, other, better, goal in COMPARISONS}
    ratio_lines = []
    for (figure, versus), values in per_run.items():
        median = statistics.median(values)
        goal, met = _goal(median, *goals[(figure, versus)])
        ratio_lines.append([figure, versus, f"{median:.2f}", f"{min(values):.2f}-{max(values):.2f}", goal or "-",
                            _met(met)])
    return "\n\n".join([_rst([head, *lines]),
                         _rst([["figure", "htda / other", "median", "range", "goal", "met"], *ratio_lines])])


def pass_table(results: dict) -> str:
    passes = int(results["config"]["workload"]["passes"])
    rows = [summarize(m, passes) for m in results["modes"].values()]
    head = ["mode"] + [f"pass {p} MB/s" for p in range(1, passes + 1)] + [f"pass {p} storage GB"
                                                                          for p in range(1, passes + 1)]
    return _rst([head, *[[r["mode"]] + [f"{r['rate_by_pass'][p]:.1f}" for p in sorted(r["rate_by_pass"])]
                         + [f"{r['link_gb_by_pass'][p]:.2f}" for p in sorted(r["link_gb_by_pass"])] for r in rows]])


_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}


def link_rate(rate: str) -> float:
    """A tc rate (``200mbit``, ``1gbit``, ``500kbit``) in bytes per second."""
    text = rate.strip().lower().removesuffix("bit").removesuffix("bps")
    unit = text[-1] if text and text[-1] in _UNITS else ""
    return float(text[:len(text) - len(unit)]) * _UNITS[unit] / 8


def new_input_bytes(results: dict) -> dict[int, int]:
    """Per pass, the bytes of the input files no earlier pass asked for (whole files: the caches fetch whole
    blocks, and the storage link moved that much in every mode that measured it)."""
    sizes = {f["lfn"]: f["size"] for f in results["files"]}
    jobs = next(iter(results["modes"].values()))["jobs"]  # every mode runs the same jobs
    seen: set[str] = set()
    out = {}
    for p in sorted({j["pass"] for j in jobs}):
        wanted = {lfn for j in jobs if j["pass"] == p for lfn in j["inputs"]} - seen
        out[p] = sum(sizes.get(lfn, 0) for lfn in wanted)
        seen |= wanted
    return out




def cold_floor(results: dict) -> str:
    """Each pass against what no cache that waits for jobs can beat: a pass cannot end before its new files
    crossed the storage link (at the link's rate) after HTCondor started its first job.  The *ideal* mode holds
    every file before the run, so it does not pay this; ``floor`` is the larger of the ideal pass and that
    bound.  Summed over the later passes, and over the whole run with the think time between passes: the
    least makespan a cache that starts reading with the jobs can reach on this workload and these links.  A
    cache that reads inputs ahead from submission (HTDA's read-ahead) starts the link earlier and can end
    a pass below it."""
    passes = int(results["config"]["workload"]["passes"])
    modes = results["modes"]
    ideal = modes.get("ideal")
    if ideal is None:
        return ""
    rate = link_rate(results["config"]["storage_rate"])
    think = float(results["config"].get("think", 0.0)) * (passes - 1)
    new = new_input_bytes(results)
    later = later_passes(passes)
    others = [m for m in modes if m != "ideal"]
    columns = ["ideal", "floor", *others]
    head = ["pass", "new inputs GB", "at link rate s", "ideal start s", *(f"{m} s" for m in columns)]
    lines: list[list[str]] = []
    floors: dict[int, float] = {}
    by_mode = {m: pass_spans(modes[m]) for m in modes}
    seconds = {m: {p: by_mode[m][p][1] - by_mode[m][p][0] for p in by_mode[m]} for m in modes}
    seconds["floor"] = floors
    for p in sorted(seconds["ideal"]):
        start = min(j["start"] for j in ideal["jobs"] if j["pass"] == p) - by_mode["ideal"][p][0]
        floors[p] = max(seconds["ideal"][p], start + new[p] / rate)
        lines.append([str(p), f"{new[p] / 1e9:.2f}", f"{new[p] / rate:.1f}", f"{start:.1f}",
                      *(f"{seconds[m][p]:.1f}" for m in columns)])
    late = {m: sum(seconds[m][p] for p in later) for m in seconds}
    run = {m: sum(seconds[m].values()) + think for m in seconds}
    for label, total in (("later", late), (f"run (+{think:.0f} s think)", run)):
        lines.append([label, "", "", "", *(f"{total[m]:.1f}" for m in columns)])
    later_line = ", ".join(f"{m} {late['floor'] / late[m]:.2f}x the floor's rate" for m in others)
    run_line = ", ".join(f"{m} {run[m] / run['floor']:.2f}x" for m in others)
    text = (_rst([head, *lines]) + f"\n\nlater passes: the floor reaches {late['ideal'] / late['floor']:.2f}x the "
            f"ideal mode's rate; {later_line}\nwhole run: no cache that starts reading with the jobs finishes "
            f"before {run['floor']:.1f} s here (one reading ahead from submission may); against that floor "
            f"{run_line}")
    if "xcache" in run:
        text += f"; {run['floor'] / run['xcache']:.2f}x XCache's run is the least such a cache could reach"
    return text


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
