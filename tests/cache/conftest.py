"""Fixtures of the cache tests: source trees, real XRootD and HTTP servers, small tmpfs devices."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from htda.cache.testing import RangeHTTPServer, XRootDServer

IS_ROOT = os.geteuid() == 0
HAS_FUSE = os.path.exists("/dev/fuse") and shutil.which("mergerfs") is not None

needs_root = pytest.mark.skipif(not IS_ROOT, reason="mounting needs root")
needs_mergerfs = pytest.mark.skipif(not (IS_ROOT and HAS_FUSE), reason="needs root, /dev/fuse and mergerfs")


def write_root_file(path: Path, entries: int = 200, seed: int = 1) -> None:
    """A small ROOT file with one TTree of numpy arrays, written by uproot."""
    import uproot

    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with uproot.recreate(path) as fh:
        fh["events"] = {"pt": rng.exponential(20.0, entries), "n": rng.integers(0, 10, entries).astype(np.int32)}


def make_tree(root: Path, sizes: dict[str, int], seed: int = 7) -> dict[str, bytes]:
    """Files of random bytes under ``root``; returns LFN -> content."""
    rng = np.random.default_rng(seed)
    out = {}
    for lfn, size in sizes.items():
        path = root / lfn.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        path.write_bytes(data)
        out[lfn] = data
    return out


@pytest.fixture
def source_tree(tmp_path):
    """A POSIX storage tree with plain files and a ROOT file; yields (root, {lfn: bytes})."""
    root = tmp_path / "storage"
    files = make_tree(root, {"/store/a/one.dat": 100_000, "/store/a/two.dat": 250_000,
                             "/store/b/three.dat": 1_000, "/store/b/empty.dat": 0})
    write_root_file(root / "store/r/events.root")
    files["/store/r/events.root"] = (root / "store/r/events.root").read_bytes()
    return root, files


@pytest.fixture
def shared_tmp():
    """A directory other users (xrootd) can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="htda-cache-test-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def xrootd_server(shared_tmp):
    if shutil.which("xrootd") is None or shutil.which("xrdcp") is None:
        pytest.skip("xrootd-server/xrootd-client are not installed")
    server = XRootDServer(shared_tmp / "export", shared_tmp / "xrd").start()
    yield server
    server.stop()


@pytest.fixture
def http_server(tmp_path):
    root = tmp_path / "http-root"
    root.mkdir()
    server = RangeHTTPServer(root).start()
    yield server
    server.stop()


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size_bytes)`` mounts a small tmpfs (a cache device that fills up) and returns its path."""
    if not IS_ROOT:
        pytest.skip("mounting a tmpfs needs root")
    mounts = []

    def make(size: int) -> Path:
        path = tmp_path / f"tmpfs{len(mounts)}"
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "htda-test", str(path)], check=True)
        mounts.append(path)
        return path

    yield make
    for path in mounts:
        subprocess.run(["umount", "-l", str(path)], check=False)
