"""Processes of the cluster: the XRootD origin, XCache, xrootdfs mounts, and their clean-up.

Every daemon is started in its host's network namespace with ``nsenter --net``
(see :meth:`Host.cmd`) and stopped by its own pid; mounts live under the run
directory and are unmounted by path, so :func:`unmount_all` can remove the
leftovers of a crashed run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from htda.cache.readthrough import PURGE_INTERVAL, ReadThroughProxy
from htda.cache.union.base import mount_type
from testkit.processes import stop_process

from .topology import Host, TopologyError, run

__all__ = ["Daemon", "xrootd_origin", "xcache", "xrootdfs_mount", "unmount_all", "mounts_under", "wait_port",
           "dedicated_filesystem", "disk_bytes", "XROOTD_PORT", "XCACHE_PORT", "PURGE_INTERVAL"]

XROOTD_PORT = 1094
XCACHE_PORT = 1095
XRD_ENV = {"XRD_CONNECTIONRETRY": "2", "XRD_REQUESTTIMEOUT": "60", "XRD_STREAMTIMEOUT": "60"}


class Daemon:
    """A background process in a host's namespace, with its log file; ``stop()`` ends it by pid."""

    def __init__(self, name: str, host: Host, argv: list[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None):
        self.name, self.host, self.log = name, host, log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(host.cmd(*argv), stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                         env={**os.environ, **(env or {})}, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check(self) -> None:
        if not self.alive():
            tail = self.log.read_text(errors="replace")[-1500:] if self.log.exists() else ""
            raise TopologyError(f"{self.name} on {self.host.name} exited with {self.proc.returncode}:\n{tail}")

    def stop(self, timeout: float = 10.0) -> None:
        stop_process(self.proc, timeout)


def wait_port(host: Host, port: int, daemon: Daemon | None = None, timeout: float = 20.0) -> None:
    """Wait until something listens on ``host``'s address and ``port`` (checked inside its namespace)."""
    deadline = time.monotonic() + timeout
    probe = (f"import socket; s=socket.socket(); s.settimeout(1); "
             f"s.connect(({host.address!r}, {port})); s.close()")
    while time.monotonic() < deadline:
        if daemon is not None:
            daemon.check()
        if subprocess.run(host.cmd(sys.executable, "-c", probe), capture_output=True).returncode == 0:
            return
        time.sleep(0.3)
    raise TopologyError(f"nothing listens on {host.address}:{port} after {timeout}s"
                        + (f" (log: {daemon.log})" if daemon else ""))


#: starts of an xrootd that dies before it listens: Debian's xrootd 5 now and then faults in libc while it
#: starts (a general protection fault, nothing in its log); the same daemon started again runs
XROOTD_STARTS = 3


def _xrootd(name: str, host: Host, config: str, workdir: Path, port: int) -> Daemon:
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.chown(workdir, "xrootd", "xrootd")
    conf = workdir / f"{name}.cfg"
    conf.write_text(config)
    for start in range(1, XROOTD_STARTS + 1):
        daemon = _start_xrootd(name, host, conf, workdir)
        try:
            wait_port(host, port, daemon)
            return daemon
        except TopologyError as exc:
            if daemon.alive() or start == XROOTD_STARTS:
                raise
            print(f"bench.cluster: {name} on {host.name} died while starting ({exc}); starting it again",
                  file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def _start_xrootd(name: str, host: Host, conf: Path, workdir: Path) -> Daemon:
    # xrootd writes its log to <dir of -l>/<name>/<file>; the .out file catches what comes before it
    # its own UTS namespace with the host's address as host name: xrootd answers "locate" (which xrootdfs
    # uses) with its host name, and the machine's name resolves to 127.0.0.1 in every namespace
    daemon = Daemon(name, host, ["unshare", "--uts", "sh", "-c", f'hostname {host.address} && exec "$@"', "xrootd",
                                 "xrootd", "-R", "xrootd", "-c", str(conf), "-l", str(workdir / "xrootd.log"),
                                 "-n", name, "-s", str(workdir / f"{name}.pid")],
                    workdir / f"{name}.out", cwd=workdir)
    daemon.log = workdir / name / "xrootd.log"
    return daemon


def xrootd_origin(host: Host, root: Path, workdir: Path, port: int = XROOTD_PORT) -> Daemon:
    """The shared file server: a plain xrootd exporting ``root`` (read by the ``xrootd`` user)."""
    # read-only: nothing a job, a cache or a clean-up does through a mount can change the dataset
    config = f"all.export / r/o\nxrd.port {port}\noss.localroot {root}\nall.adminpath {workdir}/origin/admin\n"
    return _xrootd("origin", host, config, workdir / "origin", port)


def xcache(host: Host, origin: Host, cache_dir: Path, workdir: Path, ram: str = "1g",
           port: int = XCACHE_PORT, origin_port: int = XROOTD_PORT, name: str = "xcache",
           disk: int = 0, headroom: int = 0, files: int = 0) -> Daemon:
    """An XRootD proxy file cache (pfc plugin) in front of the origin; config as in the reference notes.
    ``name`` tells several apart (the daemon's name, its directory under ``workdir``).

    ``disk``: XCache may hold this many bytes.  Its data then go on a filesystem of their own, as a site gives
    XCache its own disk, of ``disk + headroom`` bytes, with the high watermark at ``disk``: pfc purges at most
    once a minute (its least ``purgeinterval``), and on a disk that fills between two purges it cannot write
    blocks and its clients stall; ``headroom`` (what can come in within a minute) keeps that from happening, so
    XCache may hold up to ``headroom`` more for a while.  0: the host's filesystem, in practice uncapped.

    ``files``: a cap on its own files on a disk it shares (a worker's read-through proxy beside the cache
    device, as ``docs/cache.rst`` configures it): pfc's ``files`` limits (baseline, nominal, max: a half, three
    quarters and all of it; a purge brings its files down to the nominal), checked every minute."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    watermarks = ""
    if disk:
        size = disk + headroom
        dedicated_filesystem(cache_dir, size)
        watermarks = f"{0.9 * disk / size:.4f} {disk / size:.4f}"
    shutil.chown(cache_dir, "xrootd", "xrootd")
    config = ReadThroughProxy(origin=f"{origin.address}:{origin_port}", root=str(cache_dir), port=port, ram=ram,
                              files=0 if disk else files, disk=watermarks,
                              adminpath=f"{workdir}/{name}/admin").render()
    return _xrootd(name, host, config, workdir / name, port)


def dedicated_filesystem(mountpoint: Path, size: int) -> None:
    """Mount an ext4 filesystem of ``size`` bytes (a loop-mounted image beside ``mountpoint``) at
    ``mountpoint``; :func:`unmount_all` of the run directory takes it away with the rest."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    image = mountpoint.with_name(mountpoint.name + ".img")
    with open(image, "wb") as out:
        out.truncate(size)
    # no journal, no reserve and an inode a MB (cache files are large): nearly all of it holds data
    run("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-i", str(1 << 20), str(image))
    run("mount", "-o", "loop", str(image), str(mountpoint))


def disk_bytes(root: Path) -> int:
    """Bytes the files under ``root`` take on disk (allocated blocks: a cache's sparse files count what they
    hold, not their length)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:  # removed meanwhile (a purge)
                pass
    return total


def xrootdfs_mount(host: Host, server: Host, port: int, mountpoint: Path, log: Path) -> Daemon:
    """Mount ``root://server:port//`` at ``mountpoint`` with xrootdfs, its traffic in ``host``'s namespace.

    This is the worker's POSIX view of a remote XRootD server (as an NFS
    mount would be): the jobs of the no-cache and XCache runs read through
    it, and it is the storage branch of HTDA's union view.  ``allow_other``:
    jobs run as their owners under HTCondor, and FUSE lets only the mounting
    user in otherwise.
    """
    mountpoint.mkdir(parents=True, exist_ok=True)
    daemon = Daemon(f"xrootdfs-{mountpoint.name}-{host.name}", host,
                    ["xrootdfs", str(mountpoint), "-f", "-o", f"rdr=root://{server.address}:{port}//",
                     "-o", "nworkers=8", "-o", "max_read=1048576", "-o", "allow_other"], log, env=XRD_ENV)
    deadline = time.monotonic() + 20
    while mount_type(str(mountpoint)) is None:
        daemon.check()
        if time.monotonic() > deadline:
            raise TopologyError(f"xrootdfs did not mount {mountpoint} (log: {log})")
        time.sleep(0.2)
    return daemon


def mounts_under(under: Path) -> list[str]:
    """Mount points below ``under``, deepest first."""
    prefix = str(under.resolve()).rstrip("/") + "/"
    points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if len(line.split()) > 1]
    return sorted({p for p in points if p.startswith(prefix)}, key=len, reverse=True)


def unmount_all(under: Path) -> list[str]:
    """Unmount every mount below ``under`` (deepest first); return their paths."""
    found = mounts_under(under)
    for point in found:
        run("umount", "-l", point, check=False)
    return found

