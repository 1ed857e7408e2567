"""The analysis job: read muon, jet and MET branches of its input files with uproot, fill histograms.

Run as ``python -m bench.cluster.analysis --job ID --out RESULT.json PATH...``
inside a worker's namespace, or as a function by a slot process
(:mod:`bench.cluster.slot`).  It reads through whatever POSIX path it is
given (the union view, or an xrootdfs mount of the storage or of XCache) with
uproot's file-read source (not memory maps, so every byte goes through the
file system and is counted), and writes what the harness needs: a hash of the
histogram contents (the correctness check across runs), the bytes uproot
requested, events, start and end time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable

import awkward as ak
import numpy as np

__all__ = ["BRANCHES", "analyse", "histograms", "main"]

BRANCHES = ["Muon_pt", "Muon_eta", "Muon_phi", "Muon_mass", "Muon_charge",
            "Jet_pt", "Jet_eta", "Jet_phi", "Jet_mass", "MET_pt"]
#: fixed binning per branch: (bins, low, high)
BINNING = {"Muon_pt": (100, 0.0, 200.0), "Muon_eta": (60, -3.0, 3.0), "Muon_phi": (64, -3.2, 3.2),
           "Muon_mass": (50, 0.0, 0.2), "Muon_charge": (3, -1.5, 1.5), "Jet_pt": (150, 0.0, 600.0),
           "Jet_eta": (60, -3.0, 3.0), "Jet_phi": (64, -3.2, 3.2), "Jet_mass": (50, 0.0, 0.2),
           "MET_pt": (60, 0.0, 300.0)}


def histograms(events) -> dict[str, np.ndarray]:
    """One histogram per branch (all objects of all events) and the muon and jet multiplicities.

    Deliberately light on CPU: the benchmark measures how fast data arrives,
    and this machine's two cores are shared by every job and daemon.
    """
    out = {}
    for name in BRANCHES:
        bins, low, high = BINNING[name]
        values = ak.to_numpy(ak.flatten(events[name], axis=None))
        out[name] = np.histogram(values, bins, (low, high))[0]
    for name in ("Muon", "Jet"):
        out[f"n{name}"] = np.bincount(np.minimum(ak.to_numpy(ak.num(events[f"{name}_pt"])), 20), minlength=21)
    return out


def analyse(paths: list[str], step: str = "100 MB", where: Callable[[str], str] | None = None) -> dict:
    """Histograms over all files, with the bytes read and events seen; with ``where``, also each file's
    size and where ``where(path)`` said, just before the file was opened, it would be read from."""
    import uproot

    totals: dict[str, np.ndarray] = {}
    read = events = 0
    opened = []
    for path in paths:
        if where is not None:
            opened.append({"path": path, "from": where(path), "size": os.stat(path).st_size})
        with uproot.open(path, handler=uproot.MultithreadedFileSource, num_workers=1) as f:
            tree = f["Events"]
            for chunk in tree.iterate(BRANCHES, step_size=step):
                for name, counts in histograms(chunk).items():
                    totals[name] = totals.get(name, 0) + counts
                events += len(chunk)
            read += f.file.source.num_requested_bytes
    digest = hashlib.sha256()
    for name in sorted(totals):
        digest.update(name.encode() + totals[name].astype(np.int64).tobytes())
    return {"hash": digest.hexdigest(), "bytes": int(read), "events": int(events),
            "entries": {k: int(v.sum()) for k, v in sorted(totals.items())}, **({"opened": opened} if where else {})}


def run_job(job: str, paths: list[str], where: Callable[[str], str] | None = None) -> dict:
    """One job: its result with start and end time, or its error (``where``: see :func:`analyse`)."""
    result = {"job": job, "start": time.time(), "paths": paths}
    try:
        result.update(analyse(paths, where=where))
    except Exception as exc:  # noqa: BLE001 - the harness records the failure with the job
        result["error"] = f"{type(exc).__name__}: {exc}"
    result["end"] = time.time()
    return result


def serve() -> int:
    """A slot's job runner: one JSON request per input line (``{"job", "paths"}``), one result line back.

    A long-lived process per slot (as a pilot is) keeps the interpreter and
    uproot's import (~1 s of CPU) out of every job's walltime.
    """
    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(run_job(request["job"], request["paths"])), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="HTDA cluster benchmark: one analysis job")
    parser.add_argument("--serve", action="store_true", help="run jobs read from standard input (a slot)")
    parser.add_argument("--job", default="job")
    parser.add_argument("--out", help="write the result here (default: standard output)")
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args(argv)
    if args.serve:
        return serve()
    if not args.paths:
        parser.error("name the input files")
    result = run_job(args.job, args.paths)
    text = json.dumps(result)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    else:
        print(text)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
