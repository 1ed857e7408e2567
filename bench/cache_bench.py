"""Cache benchmark: staging throughput vs plain ``cp``, and read throughput through each union view.

Figures are ratios measured in one run on the same files, so the machine's
speed cancels out:

- staging: the cache's validated copy (kernel copy with the checksum taken
  from the copy, fsync, rename; "streamed": through user space with a
  read-back check, as for remote sources) against ``cp`` + ``sync`` of the
  same files (target >= 0.9 for files of 100 MB and more);
- views: sequential reads through mergerfs, overlayfs and the symlink tree
  against reading the cache device directly (overlayfs target >= 0.95).

The page cache is dropped before every timed run when this process may
(``/proc/sys/vm/drop_caches``, root); otherwise every run reads fresh files.

    python bench/cache_bench.py            # 4 x 32 MB, quick
    python bench/cache_bench.py --full     # 4 x 256 MB
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from htda.cache.backends.posix import PosixDevice, PosixStorage
from htda.cache.staging import Stager, StagingJob
from htda.cache.union.mergerfs import MergerfsDriver
from htda.cache.union.overlayfs import OverlayfsDriver
from htda.cache.union.symlink import SymlinkDriver


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def make_files(root: Path, count: int, size: int) -> list[str]:
    block = os.urandom(1 << 20)
    lfns = []
    for i in range(count):
        path = root / "store" / f"f{i}.dat"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            for j in range(size >> 20):
                fh.write(block[j % 7:] + block[: j % 7])  # not all equal blocks
        lfns.append(f"/store/f{i}.dat")
    return lfns


def time_cp(src: Path, lfns: list[str], dst: Path) -> float:
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    drop_caches()
    started = time.perf_counter()
    targets = []
    for lfn in lfns:
        target = dst / Path(lfn).name
        subprocess.run(["cp", str(src / lfn.lstrip("/")), str(target)], check=True)
        targets.append(str(target))
    subprocess.run(["sync", *targets], check=True)
    return time.perf_counter() - started


def time_stage(src: Path, lfns: list[str], dev_dir: Path, checksum: str, stream: bool, parallel: int) -> float:
    """Stage the files as the node does: ``parallel`` copies at once (``max_staging``), each fsync'ed."""
    shutil.rmtree(dev_dir, ignore_errors=True)
    device, storage = PosixDevice(str(dev_dir)), PosixStorage(str(src))
    stager = Stager(checksum=checksum, readback=True, verify_root=False, kernel_copy=not stream)
    drop_caches()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for _ in pool.map(lambda lfn: stager.stage(StagingJob(lfn, storage, device)), lfns):
            pass
    return time.perf_counter() - started


def time_read(root: str, lfns: list[str]) -> float:
    buf = bytearray(1 << 20)
    drop_caches()
    started = time.perf_counter()
    for lfn in lfns:
        with open(os.path.join(root, lfn.lstrip("/")), "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass
    return time.perf_counter() - started


def interleaved(runs: dict[str, object], rounds: int) -> dict[str, float]:
    """Best time of each run over ``rounds``, the runs taking turns so that load from others hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            times[name].append(fn())
    return {name: min(values) for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="4 files of 256 MB instead of 32 MB")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--size-mb", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=2, help="copies at once, like cache.max_staging (2)")
    parser.add_argument("--dir", default=None, help="work directory (default: a temporary one under /var/tmp)")
    parser.add_argument("--mergerfs-options", action="append", default=[], metavar="OPTS",
                        help="also read through a mergerfs view mounted with these extra options (the driver's "
                             "mount_options, e.g. passthrough.io=ro with mergerfs 2.40 or later); repeatable")
    args = parser.parse_args()
    size = (args.size_mb or (256 if args.full else 32)) << 20
    work = Path(tempfile.mkdtemp(prefix="htda-cache-bench-", dir=args.dir or "/var/tmp"))
    try:
        return run(work, args.files, size, args.rounds, args.parallel, args.mergerfs_options)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work: Path, count: int, size: int, rounds: int, parallel: int, mergerfs_options: list[str]) -> int:
    src = work / "storage"
    lfns = make_files(src, count, size)
    total_mb = count * size / 1e6
    dropping = drop_caches()
    print(f"cache bench: {count} files x {size >> 20} MiB in {work}, {parallel} copies at once, "
          f"best of {rounds} interleaved rounds (page cache dropped: {dropping})")
    variants = {"cp + sync": lambda: time_cp(src, lfns, work / "cp")}
    for checksum, stream in (("adler32", False), ("adler32", True), ("none", False)):
        label = f"stage {checksum}{' streamed' if stream else ''}"
        variants[label] = lambda c=checksum, s=stream: time_stage(src, lfns, work / "dev", c, s, parallel)
    best = interleaved(variants, rounds)
    cp = best.pop("cp + sync")
    print(f"  {'cp + sync':24s} {total_mb / cp:8.1f} MB/s")
    for label, t in best.items():
        print(f"  {label:24s} {total_mb / t:8.1f} MB/s   ratio to cp {cp / t:5.2f}")
    device = PosixDevice(str(work / "dev"))
    drivers = []
    views = [(d.name, d, {}) for d in (MergerfsDriver, OverlayfsDriver, SymlinkDriver)]
    views += [(f"mergerfs {o}", MergerfsDriver, {"mount_options": o}) for o in mergerfs_options]
    for i, (name, driver, options) in enumerate(views):
        view = work / f"view-{i}"
        union = driver(str(view), device.branches(), str(src), str(work / f"state-{i}"), options)
        try:
            union.start(lfns)
            drivers.append((name, union))
        except Exception as exc:  # noqa: BLE001 - report a driver that cannot run here, measure the rest
            print(f"  read via {name:15s} not measured: {exc}")
    try:
        reads = {"direct": lambda: time_read(device.data_dir, lfns)}
        reads.update({name: lambda v=union.view: time_read(v, lfns) for name, union in drivers})
        best = interleaved(reads, rounds)
    finally:
        for _, union in drivers:
            union.teardown()
    direct = best.pop("direct")
    print(f"  {'read cache directly':24s} {total_mb / direct:8.1f} MB/s")
    for name, t in best.items():
        print(f"  {'read via ' + name:24s} {total_mb / t:8.1f} MB/s   ratio to direct {direct / t:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
