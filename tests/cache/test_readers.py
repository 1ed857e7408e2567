"""Which files local jobs read from storage: open descriptors resolved under /proc, mapped to LFNs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from htda.cache.readers import open_lfns
from htda.cache.union.symlink import SymlinkDriver

HOLD_OPEN = "import sys; files = [open(p, 'rb') for p in sys.argv[1:]]; sys.stdin.read()"


@pytest.fixture
def tree(tmp_path):
    storage, view = tmp_path / "storage", tmp_path / "view"
    for name in ("store/a.root", "store/b.root", "store/odd name;$(x).root"):
        (storage / name).parent.mkdir(parents=True, exist_ok=True)
        (storage / name).write_bytes(b"x" * 10)
    return storage, view


def _hold(*paths):
    return subprocess.Popen([sys.executable, "-c", HOLD_OPEN, *map(str, paths)], stdin=subprocess.PIPE)


def _wait_open(proc, count):
    import time

    deadline = time.monotonic() + 10
    while len(os.listdir(f"/proc/{proc.pid}/fd")) < 3 + count:
        assert time.monotonic() < deadline, "the reader did not open its files"
        time.sleep(0.02)


def test_open_files_under_the_roots_are_found_as_lfns(tree, tmp_path):
    storage, view = tree
    driver = SymlinkDriver(str(view), [str(tmp_path / "cache0")], str(storage), str(tmp_path))
    outside = tmp_path / "elsewhere.root"
    outside.write_bytes(b"y")
    job = _hold(storage / "store/a.root", storage / "store/odd name;$(x).root", outside)
    try:
        _wait_open(job, 3)
        found = open_lfns(driver.lfn_of)
        assert {"/store/a.root", "/store/odd name;$(x).root"} <= found
        assert not any("elsewhere" in lfn for lfn in found)
        assert "/store/a.root" not in open_lfns(driver.lfn_of, skip_pids=frozenset({job.pid}))
    finally:
        job.stdin.close()
        job.wait(10)
    assert "/store/a.root" not in open_lfns(driver.lfn_of)


def test_deleted_files_and_unmappable_paths_are_ignored(tree, tmp_path):
    storage, view = tree
    driver = SymlinkDriver(str(view), [], str(storage), str(tmp_path))
    job = _hold(storage / "store/b.root")
    try:
        _wait_open(job, 1)
        os.unlink(storage / "store/b.root")  # the descriptor now reads ".../b.root (deleted)"
        assert "/store/b.root" not in open_lfns(driver.lfn_of)
    finally:
        job.stdin.close()
        job.wait(10)


def test_a_fake_proc_tree_with_hostile_links_and_vanishing_pids(tmp_path):
    proc = tmp_path / "proc"
    (proc / "1" / "fd").mkdir(parents=True)
    (proc / "2").mkdir()  # a process without a readable fd directory
    (proc / "self").mkdir()
    os.symlink("/view/store/ok.root", proc / "1" / "fd" / "3")
    os.symlink("/view/store/../../etc/shadow", proc / "1" / "fd" / "4")  # never an LFN
    os.symlink("socket:[1234]", proc / "1" / "fd" / "5")
    lfn_of = lambda p: p[len("/view"):] if p.startswith("/view/") else None
    assert open_lfns(lfn_of, proc=str(proc)) == {"/store/ok.root"}


def test_the_base_driver_maps_view_and_storage_paths(tmp_path):
    driver = SymlinkDriver(str(tmp_path / "view"), [], str(tmp_path / "storage"), str(tmp_path))
    assert driver.lfn_of(f"{tmp_path}/view/store/x.root") == "/store/x.root"
    assert driver.lfn_of(f"{tmp_path}/storage/store/x.root") == "/store/x.root"
    assert driver.lfn_of(f"{tmp_path}/viewer/store/x.root") is None  # a sibling with the same prefix
    assert driver.lfn_of("/etc/passwd") is None
