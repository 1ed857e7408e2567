"""Validation cost of request bodies on the hot paths: msgspec (htda.protocol) against the old checker.

The old way (before issue 15) was ``json.loads`` then the home-made JSON-Schema subset ``htda/node/schema.py``
walking the dict; the new one is one ``msgspec.json.decode`` into the protocol's typed structs.  Bodies:
a heartbeat of a cache node, a job publish of 100 jobs of 10 inputs (the submit agent's batch), a full holdings
report of 10,000 files and a lookup of 1,000 LFNs (the old lookup route skipped the checker: ``json.loads``
and a glance, the ``json.loads`` column).  Prints microseconds per body, best of 5 repeats::

    python bench/protocol_bench.py            # new only
    git show 9abe33a:htda/node/schema.py > /tmp/schema.py
    python bench/protocol_bench.py --old /tmp/schema.py   # also the old checker, on the same types' schemas
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec  # noqa: E402

from htda.protocol import coordinator, locator, node  # noqa: E402
from htda.protocol.base import decode  # noqa: E402


def bodies() -> dict[str, tuple[bytes, type]]:
    beat = {"name": "worker-017", "url": "http://10.0.0.17:8740", "roles": ["cache"], "version": "0.1.0",
            "started": 1795642839.234, "info": {"cache": {"capacity_bytes": 65458412857, "free_bytes": 6545836830,
                                                          "used_bytes": 44549, "files": 2, "staging": 0}}}
    jobs = {"jobs": [{"job_id": f"sched#{i}.0", "owner": "alice", "cpus": 1, "memory": 2048,
                      "submit_time": 1795642839.0 + i, "task": "sched#4711",
                      "inputs": [f"/store/data/run{i % 7}/events_{k:03d}.root" for k in range(10)]}
                     for i in range(100)]}
    holdings = {"node": "worker-017", "replace": True,
                "files": [{"lfn": f"/store/data/run{i % 97}/events_{i:06d}.root", "size": 2_000_000_000 + i}
                          for i in range(10_000)]}
    lookup = {"lfns": [f"/store/data/run{i % 97}/events_{i:06d}.root" for i in range(1000)]}
    enc = lambda value: json.dumps(value, separators=(",", ":")).encode()
    return {"heartbeat": (enc(beat), node.Heartbeat), "jobs (100 x 10 inputs)": (enc(jobs), coordinator.JobsRequest),
            "holdings (10,000 files)": (enc(holdings), locator.HoldingsRequest),
            "lookup (1,000 LFNs)": (enc(lookup), locator.LookupRequest)}


def best(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def _inline(schema: dict) -> dict:
    """The type's JSON Schema with its references resolved: the old checker knows no ``$ref``."""
    defs = schema.pop("$defs", {})

    def walk(value):
        if isinstance(value, dict):
            if "$ref" in value:
                return walk(defs[value["$ref"].rsplit("/", 1)[1]])
            return {k: walk(v) for k, v in value.items()}
        return [walk(v) for v in value] if isinstance(value, list) else value

    return walk(schema)


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="the old htda/node/schema.py (from git)")
    args = parser.parse_args()
    checker = _load(args.old, "old_schema") if args.old else None
    print(f"{'body':26} {'bytes':>9} {'new µs':>10} {'json.loads':>10}"
          + (f" {'old µs':>10} {'old/new':>8}" if checker else ""))
    for label, (raw, kind) in bodies().items():
        number = max(1, 200_000 // len(raw))
        new = best(lambda raw=raw, kind=kind: decode(raw, kind), number)
        parse = best(lambda raw=raw: json.loads(raw), number)  # parsing alone, checking nothing
        line = f"{label:26} {len(raw):9,d} {new:10.1f} {parse:10.1f}"
        if checker:
            schema = _inline(msgspec.json.schema(kind))
            was = best(lambda raw=raw, schema=schema: checker.check(json.loads(raw), schema), number)
            line += f" {was:10.1f} {was / new:8.1f}"
        print(line)


if __name__ == "__main__":
    main()
