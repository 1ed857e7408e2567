"""Tiny traces written by hand, replayed through the simulator's policies."""

from __future__ import annotations

import argparse
import signal
import struct

import numpy as np

from htda.simulator import cli
from htda.simulator.binary import RECORD
from htda.simulator.engine import ReplayResult, replay
from htda.simulator.offline import BeladyPolicy
from htda.simulator.trace import NO_GROUP, Chunk


def restore_ctrl_c() -> None:
    """A child's ``preexec_fn``: Ctrl-C (SIGINT) back to its default.  A test run started in the background of a
    script (CI's ``... &``) ignores it, and a Python started with it ignored never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def chunk_of(names: list, sizes: dict | int = 1, groups: dict | None = None, step: float = 1.0) -> Chunk:
    """Requests for ``names`` (any hashable), one per ``step`` seconds; ids in order of first appearance."""
    ids: dict = {}
    for name in names:
        ids.setdefault(name, len(ids))
    size_of = (lambda n: sizes) if isinstance(sizes, int) else sizes.__getitem__
    group_ids: dict = {}
    group_of = (lambda n: NO_GROUP) if groups is None else (lambda n: group_ids.setdefault(groups[n], len(group_ids)))
    return Chunk.from_lists([i * step for i in range(len(names))], [ids[n] for n in names],
                            [size_of(n) for n in names], [group_of(n) for n in names])


def run(chunk: Chunk, policies: list, capacity: int, bound: bool = True) -> dict:
    """Replay one chunk through ``policies`` plus Belady (and PFOO-L); results by label."""
    result: ReplayResult = replay([chunk], policies, [BeladyPolicy(capacity)], [capacity] if bound else [])
    return {r.label: r for r in result.results}


def run_cli(*argv: str):
    """``htda ARGV`` in this process: what the command returns (its text, or its JSON's data with --json first)."""
    parser = argparse.ArgumentParser(prog="htda")
    parser.add_argument("--json", action="store_true")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def oracle_bytes(requests: list[tuple[int, int, int]]) -> bytes:
    """``requests`` (time, id, size) as libCacheSim writes them (its next-access field filled with -1: never
    read)."""
    records = np.zeros(len(requests), dtype=RECORD)
    for i, (t, oid, size) in enumerate(requests):
        records[i] = (t, oid, size, -1)
    return records.tobytes()


def vscsi_bytes(requests: list[tuple[float, int, int]], version: int) -> bytes:
    """``requests`` (time in seconds, block number, length) as a vscsi trace of ``version`` 1 or 2, packed field by
    field as libCacheSim's vscsi.h lays the records out (its marks in the high byte of ``ver``; the other fields
    filled with what a reader must not take for the request)."""
    packed = []
    for sn, (t, lbn, size) in enumerate(requests):
        ts, ver = round(t * 1_000_000), version << 8 | 0x5A
        if version == 1:  # sn, len, nSG, cmd, ver, lbn, ts
            packed.append(struct.pack("<IIIHHQQ", sn, size, 3, 0x28, ver, lbn, ts))
        else:  # cmd, ver, sn, len, nSG, lbn, ts, rt
            packed.append(struct.pack("<HHIIIQQQ", 0x2A, ver, sn, size, 3, lbn, ts, 777))
    return b"".join(packed)
