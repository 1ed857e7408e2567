"""Fixtures of the cache tests: source trees, real XRootD and HTTP servers, small tmpfs devices."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from testkit.storage import RangeHTTPServer, XRootDServer, make_tree, write_root_file


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


