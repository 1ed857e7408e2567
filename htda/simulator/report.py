"""Reporting a simulation: text tables, a JSON document and PNG plots (matplotlib, Agg backend)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..units import MAX_BYTES, parse_bytes
from .engine import PolicyResult, ReplayResult

__all__ = ["human_bytes", "parse_size", "summary_table", "sweep_table", "as_dict", "plot_sweep", "plot_over_time",
           "best_half_lives"]

def parse_size(text: str, reference: int | None = None) -> int:
    """``"500G"``, ``"1.5TiB"``, ``"123456"`` bytes, or ``"10%"`` of ``reference`` bytes."""
    value = text.strip()
    if not value.endswith("%"):
        try:
            return parse_bytes(value, "cache size")
        except ValueError:
            raise ValueError(f"cache size {text!r} is not a size (e.g. 500G, 1.5TiB, 10%)") from None
    if reference is None:
        raise ValueError(f"cache size {text!r}: a percentage needs a footprint to refer to")
    try:
        share = float(value[:-1])
    except ValueError:
        raise ValueError(f"cache size {text!r} is not a size (e.g. 500G, 1.5TiB, 10%)") from None
    size = share / 100 * reference
    if not 0 <= size <= MAX_BYTES:  # (nan fails both)
        raise ValueError(f"cache size {text!r} must be a share >= 0 of the footprint ({reference:,} bytes), at most "
                         f"{MAX_BYTES:,} bytes")
    return int(size)


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # unreachable; keeps type checkers calm


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    return "\n".join(lines)


def summary_table(result: ReplayResult) -> str:
    """One row per (cache size, policy): hit ratios, bytes from storage, churn, replay speed."""
    header = ["policy", "cache", "hit ratio", "byte hit ratio", "from storage", "staged", "evicted", "req/s (cpu)"]
    rows = []
    for r in sorted(result.results, key=lambda r: r.capacity):
        speed = f"{result.requests / r.cpu_seconds:,.0f}" if r.cpu_seconds > 0 else "-"
        churn = ("-", "-") if r.bound else (human_bytes(r.staged), human_bytes(r.evicted))
        rows.append([r.label + (" (bound)" if r.bound else ""), human_bytes(r.capacity),
                     f"{result.hit_ratio(r):.4f}", f"{result.byte_hit_ratio(r):.4f}",
                     human_bytes(result.fetched(r)), *churn, speed])
    head = (f"{result.requests:,} requests, {human_bytes(result.bytes)} requested, {result.objects:,} objects "
            f"(an object is an (id, size) pair), footprint {human_bytes(result.footprint_bytes)}")
    return head + "\n" + _table(header, rows)


def _by_label(result: ReplayResult) -> dict[str, dict[int, PolicyResult]]:
    table: dict[str, dict[int, PolicyResult]] = {}
    for r in result.results:
        table.setdefault(r.label, {})[r.capacity] = r
    return table


def sweep_table(result: ReplayResult, byte: bool = True, reference: int | None = None) -> str:
    """Hit ratio (byte hit ratio if ``byte``) of every policy (rows) at every cache size (columns)."""
    ratio = result.byte_hit_ratio if byte else result.hit_ratio
    capacities = sorted({r.capacity for r in result.results})
    header = ["byte hit ratio" if byte else "hit ratio"] + [_size_label(c, reference) for c in capacities]
    rows = [[label] + [f"{ratio(by_cap[c]):.4f}" if c in by_cap else "-" for c in capacities]
            for label, by_cap in _by_label(result).items()]
    return _table(header, rows)


def best_half_lives(result: ReplayResult, reference: int | None = None) -> str:
    """Per cache size: the best HTDA half-life, how it compares with the best other policy and the bound."""
    lines = []
    for capacity in sorted({r.capacity for r in result.results}):
        at = [r for r in result.results if r.capacity == capacity]
        htda = [r for r in at if r.label.startswith("htda(")]
        others = [r for r in at if not r.label.startswith("htda(") and not r.bound and r.label != "belady"]
        bound = next((r for r in at if r.bound), None)
        if not htda:
            continue
        best = max(htda, key=result.byte_hit_ratio)
        line = f"{_size_label(capacity, reference)}: best {best.label} byte hit ratio {result.byte_hit_ratio(best):.4f}"
        auto = next((r for r in htda if r.label == "htda(auto)"), None)
        if auto is not None and auto is not best:
            line += f" (htda(auto) {result.byte_hit_ratio(auto):.4f})"
        if others:
            rival = max(others, key=result.byte_hit_ratio)
            line += f", best other {rival.label} {result.byte_hit_ratio(rival):.4f}"
        if bound is not None:
            limit = result.byte_hit_ratio(bound)
            line += f", PFOO-L bound {limit:.4f} (gap {limit - result.byte_hit_ratio(best):.4f})"
        lines.append(line)
    return "\n".join(lines)


def _size_label(capacity: int, reference: int | None) -> str:
    if reference:
        return f"{human_bytes(capacity)} ({100 * capacity / reference:.3g}%)"
    return human_bytes(capacity)


def as_dict(result: ReplayResult) -> dict[str, Any]:
    """The result as JSON-able data."""
    return {
        "requests": result.requests, "bytes": result.bytes, "objects": result.objects,
        "footprint_bytes": result.footprint_bytes,
        "windows": {"start_time": result.start_series, "requests": result.requests_series,
                    "bytes": result.bytes_series},
        "results": [{
            "policy": r.label, "capacity_bytes": r.capacity, "bound": r.bound,
            "hits": r.hits, "hit_bytes": r.hit_bytes, "hit_ratio": result.hit_ratio(r),
            "byte_hit_ratio": result.byte_hit_ratio(r), "fetched_bytes": result.fetched(r),
            "staged_bytes": r.staged, "evicted_bytes": r.evicted, "seconds": r.seconds,
            "cpu_seconds": r.cpu_seconds,
            "hit_bytes_series": r.hit_bytes_series,
        } for r in result.results],
    }


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _style(label: str, r: PolicyResult, index: int, colors: Any) -> dict[str, Any]:
    """How ``label``, the ``index``-th policy of the plot, is drawn: ten colours do not tell eleven policies apart,
    so each gets its own of ``colors`` (tab20), baselines squares, HTDA circles, its filtered variants dash-dotted,
    the adaptive default thicker."""
    if r.bound:
        return {"linestyle": "--", "color": "black"}
    if label == "belady":
        return {"linestyle": ":", "color": "black"}
    htda = label.startswith("htda")
    shade = (2 * index) % 20 + (index // 10) % 2  # tab20 pairs a dark and a light shade: the ten dark ones first
    return {"marker": "o" if htda else "s", "markersize": 3, "color": colors(shade),
            "linestyle": "-." if htda and "+" in label else "-", "linewidth": 2.5 if label == "htda(auto)" else 1.5}


def plot_sweep(result: ReplayResult, path: str | os.PathLike, reference: int | None = None) -> None:
    """Hit ratio and byte hit ratio against cache size, one line per policy (bounds dashed)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    scale, unit = (reference / 100, "% of footprint") if reference else (1e9, "GB")
    colors = plt.get_cmap("tab20")
    for index, (label, by_cap) in enumerate(_by_label(result).items()):
        capacities = sorted(by_cap)
        xs = [c / scale for c in capacities]
        style = _style(label, by_cap[capacities[0]], index, colors)
        name = label + (" (PFOO-L bound)" if by_cap[capacities[0]].bound else "")
        axes[0].plot(xs, [result.hit_ratio(by_cap[c]) for c in capacities], label=name, **style)
        axes[1].plot(xs, [result.byte_hit_ratio(by_cap[c]) for c in capacities], label=name, **style)
    for ax, title in zip(axes, ("hit ratio", "byte hit ratio")):
        ax.set_xlabel(f"cache size ({unit})")
        ax.set_ylabel(title)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    for ax in axes:
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{result.requests:,} requests, footprint {human_bytes(result.footprint_bytes)}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_over_time(result: ReplayResult, capacity: int, path: str | os.PathLike) -> None:
    """Byte hit ratio per window of requests at one cache size, one line per policy."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(12, 4.5))
    hours = [(t - result.start_series[0]) / 3600 for t in result.start_series]
    colors = plt.get_cmap("tab20")
    order = {label: index for index, label in enumerate(_by_label(result))}  # the same colours as the sweep's
    for r in result.results:
        if r.capacity != capacity:
            continue
        ratios = [h / b if b else 0.0 for h, b in zip(r.hit_bytes_series, result.bytes_series)]
        ax.plot(hours, ratios, label=r.label + (" (PFOO-L bound)" if r.bound else ""),
                **_style(r.label, r, order[r.label], colors))
    ax.set_xlabel("trace time (hours)")
    ax.set_ylabel("byte hit ratio per window")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"cache {human_bytes(capacity)}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
