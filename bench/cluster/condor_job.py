"""The analysis job as an HTCondor job: ``python -m bench.cluster.condor_job --job ID LFN...``.

The startd of the worker it lands on gives it, in its environment
(``STARTER_JOB_ENVIRONMENT``), the worker's name (``HTDA_BENCH_WORKER``),
where that worker's jobs read the dataset (``HTDA_BENCH_ROOT``: the union view
in the HTDA run, the xrootdfs mount otherwise) and its cache device's data
directory (``HTDA_BENCH_CACHE``, HTDA run only).  The starter names the job's
and the slot's ads (``_CONDOR_JOB_AD``, ``_CONDOR_MACHINE_AD``).  The job
prints one JSON line: :func:`bench.cluster.analysis.run_job`'s result plus
the worker, the slot, the inputs the cache device held when it started and
the nodes the translate hook preferred.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

__all__ = ["ad_values", "cached_inputs", "main"]


def ad_values(path: str | None, names: tuple[str, ...]) -> dict[str, str]:
    """Chosen attributes of an ad file in the old format (``Name = value``), strings unquoted."""
    wanted = {n.lower(): n for n in names}
    out: dict[str, str] = {}
    try:
        lines = Path(path).read_text(errors="replace").splitlines() if path else []
    except OSError:
        return out
    for line in lines:
        name, sep, value = line.partition(" = ")
        if sep and name.strip().lower() in wanted:
            value = value.strip()
            out[wanted[name.strip().lower()]] = value[1:-1] if value.startswith('"') and value.endswith('"') else value
    return out


def cached_inputs(cache: str, inputs: list[str]) -> list[str]:
    """The inputs (LFNs) whose copy is on the worker's cache device now."""
    if not cache:
        return []
    return [lfn for lfn in inputs if (Path(cache) / lfn.lstrip("/")).exists()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="HTDA cluster benchmark: one analysis job under HTCondor")
    parser.add_argument("--job", required=True)
    parser.add_argument("inputs", nargs="+", help="LFNs")
    args = parser.parse_args(argv)
    import uproot  # noqa: F401 - imported before the job's clock starts, as a slot runner would have it

    from .analysis import run_job

    root = os.environ.get("HTDA_BENCH_ROOT", "")
    cache = os.environ.get("HTDA_BENCH_CACHE", "")
    cached = cached_inputs(cache, args.inputs)
    job_ad = ad_values(os.environ.get("_CONDOR_JOB_AD"), ("HTDA_PreferredNodes", "ClusterId"))
    slot_ad = ad_values(os.environ.get("_CONDOR_MACHINE_AD"), ("SlotID", "HTDA_NodeName", "Name"))
    # the ground truth the cache node's open counters are checked against: copy or storage, as the file is opened
    where = (lambda path: "cache" if cached_inputs(cache, [path[len(root):]]) else "storage") if cache else None
    result = run_job(args.job, [root + lfn for lfn in args.inputs], where=where)
    result.update(worker=os.environ.get("HTDA_BENCH_WORKER", "?"), slot=int(slot_ad.get("SlotID", "0") or 0),
                  slot_name=slot_ad.get("Name", ""), cached=cached, cluster=job_ad.get("ClusterId", ""),
                  preferred=[n for n in job_ad.get("HTDA_PreferredNodes", "").split(",") if n])
    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
