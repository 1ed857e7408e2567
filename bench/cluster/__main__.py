"""``python -m bench.cluster run|cleanup|dataset``: the cluster benchmark's one command (see README.rst here)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from .condor import INSTALL_HINT, condor_home
from .dataset import DatasetSpec, ensure_dataset
from .report import cold_floor, correctness, daemon_table, hit_check, pass_table, placement, plot, ratios, spread, table
from .runner import MODES, VIEWS, RunConfig, run_benchmark
from .services import unmount_all
from .topology import TopologyError, check_can_run, cleanup
from .workload import WorkloadSpec


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="build the cluster, run no-cache, HTDA and XCache, print and plot")
    clean = sub.add_parser("cleanup", help="remove namespaces, processes and mounts left by a run")
    data = sub.add_parser("dataset", help="only write (or check) the dataset")
    again = sub.add_parser("report", help="print the tables (and redraw the plots) of a results.json")
    again.add_argument("results", type=Path)
    several = sub.add_parser("summary", help="median and range of several runs' results.json (same configuration)")
    several.add_argument("results", type=Path, nargs="+")
    for q in (run, clean, data, again):
        q.add_argument("--workdir", type=Path, default=Path("/var/tmp/htda-bench"),
                       help="runs, results and (by default) the dataset live here")
        q.add_argument("--prefix", default="htdab", help="name prefix of namespaces and links")
    for q in (run, data):
        q.add_argument("--dataset-dir", type=Path, help="dataset cache (default: WORKDIR/dataset)")
        q.add_argument("--dataset-mb", type=float, default=2048, help="total dataset size in MB")
        q.add_argument("--file-mb", type=float, nargs=2, default=(20, 120), metavar=("MIN", "MAX"))
        q.add_argument("--compression", default="none", help="none or zlib:N, lzma:N, zstd:N, lz4:N")
    run.add_argument("--workers", type=int, default=4)
    run.add_argument("--slots", type=int, default=2, help="job slots per worker")
    run.add_argument("--storage-rate", default="200mbit", help="tc tbf rate of the storage link")
    run.add_argument("--host-rate", default="1gbit",
                     help="tc tbf rate of every other host's link: the service host (where XCache runs) and each "
                          "worker, one NIC each ('': unshaped)")
    run.add_argument("--cache-mb", type=int, default=1024, help="HTDA cache device capacity per worker")
    run.add_argument("--readthrough-mb", type=int,
                     help="HTDA run: what each worker's read-through proxy may keep of its own files (default: "
                          "cache-mb / 8, a small share beside the device as docs/cache.rst says; 0: uncapped)")
    run.add_argument("--xcache-disk-mb", type=int,
                     help="XCache's own disk, a filesystem of this size (default: the total of HTDA's devices, "
                          "workers x cache-mb; 0, or a cap the whole dataset fits in: the host's disk, uncapped)")
    run.add_argument("--passes", type=int, default=4)
    run.add_argument("--jobs-per-pass", type=int, default=12)
    run.add_argument("--files-per-job", type=int, default=3)
    run.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of group popularity")
    run.add_argument("--think", type=float, default=10.0, help="seconds between passes")
    run.add_argument("--python-hooks", action="store_true",
                     help="run the Python job-router hooks instead of the compiled ones (install-hooks --native)")
    run.add_argument("--rank-only", action="store_true",
                     help="HTDA steers by Rank alone (submit.steer_requirements = false, HTDA's default); "
                          "by default the HTDA run sets it true: a job steered to cache nodes waits for one of them")
    run.add_argument("--no-read-through", action="store_true",
                     help="HTDA run: workers read the storage directly, not through a proxy file cache of their own")
    run.add_argument("--view", choices=VIEWS, default="mergerfs",
                     help="HTDA run: the cache nodes' union view (HTDA's default mergerfs, FUSE; symlink: a tree of "
                          "links, no FUSE on the read path; overlayfs cannot stack over the xrootdfs mounts)")
    run.add_argument("--coordinator", action="append", default=[], metavar="KEY=VALUE",
                     help="HTDA run: set the coordinator's KEY (docs/configuration.rst) to VALUE, a TOML value "
                          "(max_defer=0, policy=\"lru\"); repeatable")
    run.add_argument("--submit", action="append", default=[], metavar="KEY=VALUE",
                     help="HTDA run: set the submit agent's KEY (docs/configuration.rst) to VALUE, a TOML value "
                          "(relative_fraction=1.0); repeatable")
    run.add_argument("--modes", default=",".join(MODES), help="comma list of " + ", ".join(MODES))
    run.add_argument("--no-route-wait", action="store_true",
                     help="real HTCondor: HTDA's jobs do not require HTDA_Routed, so the negotiator may match them "
                          "before the job router has run HTDA's hook on them")
    run.add_argument("--negotiator", choices=("condor", "standin"),
                     help="what places and runs the jobs: a real HTCondor pool (the default where HTCondor is "
                          "found: HTDA_CONDOR_HOME, ../shared/htcondor, condor_master on PATH) or the stand-in "
                          "negotiator (the default elsewhere)")
    run.add_argument("--small", action="store_true", help="a quick check: 300 MB, 2 workers, 2 passes of 4 jobs")
    return p


def _settings(pairs: list[str], option: str) -> dict[str, Any]:
    """KEY=VALUE pairs, each VALUE a TOML value, as a dict; ValueError naming the option otherwise."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            if not sep or not key.strip():
                raise ValueError("not KEY=VALUE")
            settings[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except (tomllib.TOMLDecodeError, ValueError) as exc:
            raise ValueError(f"{option} {pair!r}: {exc} (strings need quotes: key=\"text\")") from None
    return settings


def _spec(args) -> DatasetSpec:
    return DatasetSpec(total_mb=args.dataset_mb, min_file_mb=args.file_mb[0], max_file_mb=args.file_mb[1],
                       compression=args.compression)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so every finally/__exit__ tears the cluster down
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log = lambda msg: print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)
    try:
        if args.command == "cleanup":
            mounts = unmount_all(args.workdir)
            gone = cleanup(args.prefix)
            log(f"unmounted {len(mounts)} mounts, removed {len(gone)} namespaces: {' '.join(gone) or '-'}")
            return 0
        if args.command == "dataset":
            files = ensure_dataset(args.dataset_dir or args.workdir / "dataset", _spec(args), log=log)
            log(f"{len(files)} files, {sum(f.size for f in files) / 1e9:.2f} GB")
            return 0
        if args.command == "summary":
            print(spread([json.loads(path.read_text()) for path in args.results]))
            return 0
        if args.command == "report":
            return _print(json.loads(args.results.read_text()), args.results.parent)
        check_can_run()
        if args.small:
            args.dataset_mb, args.file_mb, args.workers = 300, (20, 40), 2
            args.passes, args.jobs_per_pass, args.files_per_job, args.think = 2, 4, 2, 3.0
            args.dataset_dir = args.dataset_dir or args.workdir / "dataset-small"
        home = condor_home()
        negotiator = args.negotiator or ("condor" if home else "standin")
        if negotiator == "condor" and home is None:
            raise ValueError(f"--negotiator condor: {INSTALL_HINT}")
        log(f"placement: {'real HTCondor in ' + str(home) if negotiator == 'condor' else 'the stand-in negotiator'}")
        if args.view != "mergerfs":
            log(f"HTDA's union view: {args.view} (HTDA's default: mergerfs)")
        config = RunConfig(workdir=args.workdir, negotiator=negotiator, condor_home=home,
                           wait_routed=not args.no_route_wait,
                           dataset_dir=args.dataset_dir, prefix=args.prefix,
                           workers=args.workers, slots=args.slots, storage_rate=args.storage_rate,
                           host_rate=args.host_rate, cache_mb=args.cache_mb, xcache_disk_mb=args.xcache_disk_mb,
                           readthrough_mb=args.readthrough_mb,
                           think=args.think,
                           steer_requirements=not args.rank_only, read_through=not args.no_read_through,
                           native_hooks=not args.python_hooks, view=args.view,
                           coordinator_options=_settings(args.coordinator, "--coordinator"),
                           submit_options=_settings(args.submit, "--submit"),
                           modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()), dataset=_spec(args),
                           workload=WorkloadSpec(passes=args.passes, jobs_per_pass=args.jobs_per_pass,
                                                 files_per_job=args.files_per_job, skew=args.skew))
        results = run_benchmark(config, log=log)
    except (TopologyError, ValueError) as exc:
        print(f"bench.cluster: {exc}", file=sys.stderr)
        return 2
    outdir = args.workdir / "results" / time.strftime("%Y%m%dT%H%M%S")
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "results.json").write_text(json.dumps(results))
    return _print(results, outdir)


def _print(results: dict, outdir: Path) -> int:
    """The tables, the correctness check and the plots; exit status 1 if any job's histogram differs."""
    same, total, bad = correctness(results)
    print(f"\nstorage link: {results['shaping']}")
    print(f"every other host's link: {results.get('host_shaping', 'unshaped')}")
    print(f"placement: {placement(results)}\n")
    print(table(results), "\n")
    if comparison := ratios(results):
        print(comparison, "\n")
    print(pass_table(results), "\n")
    if floor := cold_floor(results):
        print(floor, "\n")
    print(daemon_table(results), "\n")
    print(f"correctness: {same}/{total} jobs gave identical histograms in every mode"
          + (f"; DIFFERENT: {' '.join(bad[:10])}" if bad else ""))
    checked = hit_check(results["modes"]["htda"]) if "htda" in results["modes"] else None
    if checked is not None:
        print(f"hit metric: the jobs opened {100 * checked.truth:.1f} % of their input bytes from the copies, the "
              f"cache nodes' htda_cache_job_opened_bytes_total say {100 * checked.metric:.1f} %: "
              + ("agree" if checked.ok else "DISAGREE") + "".join(f"; {p}" for p in checked.problems))
    for path in plot(results, outdir):
        print(f"plot: {path}")
    print(f"results: {outdir / 'results.json'}")
    return 0 if not bad and (checked is None or checked.ok) else 1


if __name__ == "__main__":
    sys.exit(main())
