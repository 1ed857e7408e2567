"""Which files jobs read: fanotify on each real view (mergerfs, overlayfs, symlink), watched by a process without
CAP_SYS_PTRACE while a real other user reads; the /proc scan as the fallback."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from htda.cache import readers
from htda.cache.readers import open_lfns, scan_proc, watch
from htda.cache.union.mergerfs import MergerfsDriver
from htda.cache.union.overlayfs import OverlayfsDriver
from htda.cache.union.symlink import SymlinkDriver
from testkit.nodes import wait_until
from tests.users import User

IS_ROOT = os.geteuid() == 0
HAS_FUSE = os.path.exists("/dev/fuse") and shutil.which("mergerfs") is not None
needs_root = pytest.mark.skipif(not IS_ROOT, reason="fanotify and overlayfs need root")
needs_mergerfs = pytest.mark.skipif(not (IS_ROOT and HAS_FUSE), reason="needs root, /dev/fuse and mergerfs")
DRIVERS = {"mergerfs": MergerfsDriver, "overlayfs": OverlayfsDriver, "symlink": SymlinkDriver}
MOUNTED = [pytest.param("mergerfs", marks=needs_mergerfs), pytest.param("overlayfs", marks=needs_root)]
ALL = [*MOUNTED, pytest.param("symlink", marks=needs_root)]

#: a job: opens its files, says so, keeps them open until its standard input closes
HOLD_OPEN = "import sys; files = [open(p, 'rb') for p in sys.argv[1:]]; print('open', flush=True); sys.stdin.read()"

#: opens a file, hands the descriptor to a child and closes its own: the child's close is the last one
HANDOFF = """
import os, subprocess, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
child = subprocess.Popen([sys.executable, "-c", "import sys; print('open', flush=True); sys.stdin.read()"],
                         pass_fds=[fd])
os.close(fd)
child.wait()
print("closed", flush=True)
time.sleep(60)
"""

#: the cache daemon's side, in a process of its own so that it can run without CAP_SYS_PTRACE: builds the driver
#: from its arguments (the view is already mounted), starts the watch, answers one query per line on stdin
WATCHER = """
import json, logging, sys
from htda.cache import readers
logging.basicConfig(level=logging.INFO)
from htda.cache.union import mergerfs, overlayfs, symlink
kind, view, branch, storage, state = sys.argv[1:6]
cls = {"mergerfs": mergerfs.MergerfsDriver, "overlayfs": overlayfs.OverlayfsDriver, "symlink": symlink.SymlinkDriver}
driver = cls[kind](view, [branch], storage, state, {})
found = readers.watch(driver)
counted = []
if found:
    found.on_open = lambda path, size, seen: counted.append(path)
print(json.dumps("fanotify" if found else "proc"), flush=True)
for line in sys.stdin:
    if line.strip() == "counted":
        readers.open_lfns(driver.lfn_of)  # handles what is queued
        print(json.dumps(counted), flush=True)
    elif line.strip() == "proc":
        print(json.dumps(sorted(readers.scan_proc(driver.lfn_of))), flush=True)
    else:
        print(json.dumps(sorted(readers.open_lfns(driver.lfn_of))), flush=True)
"""


class Watcher:
    """The watcher process: ``query()`` is what the cache would report, ``query("proc")`` what the old scan sees."""

    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.log = ""
        self.method = json.loads(self.proc.stdout.readline())

    def query(self, how: str = "fanotify") -> set[str]:
        return set(self.ask(how))

    def ask(self, how: str) -> list[str]:
        self.proc.stdin.write(how + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)
        self.log = self.proc.stderr.read()


class Job:
    """A process holding files open (as ``user`` when given, with no capabilities), until :meth:`close`."""

    def __init__(self, paths: list[str], user: User | None = None, prefix: list[str] | None = None):
        argv = [sys.executable, "-c", HOLD_OPEN, *paths]
        if user is not None:  # as tests.users.run_as does, but left running
            argv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--", *argv]
        self.proc = subprocess.Popen([*(prefix or []), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout.readline().strip() == "open", "the job could not open its files"

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.fixture
def world(shared_tmp):
    """Storage and a cache branch every user can read: ``(storage, branch, state)`` under ``shared_tmp``."""
    storage, branch, state = shared_tmp / "storage", shared_tmp / "branch", shared_tmp / "state"
    for name in ("store/a/one.dat", "store/a/two.dat", "store/b/odd name;$(x).dat"):
        (storage / name).parent.mkdir(parents=True, exist_ok=True)
        (storage / name).write_bytes(b"x" * 1000)
    branch.mkdir()
    state.mkdir()
    for path in [storage, *storage.rglob("*"), branch]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return storage, branch, state


@pytest.fixture
def started(world, shared_tmp):
    """``started(kind)`` mounts a view of ``kind`` over ``world``: (driver, view path); torn down afterwards."""
    drivers = []

    def start(kind: str):
        storage, branch, state = world
        driver = DRIVERS[kind](str(shared_tmp / "view"), [str(branch)], str(storage), str(state),
                               {"grace": "60", "min_interval": "0"})
        drivers.append(driver)
        driver.start([])
        return driver, str(shared_tmp / "view")

    yield start
    for driver in drivers:
        readers.unwatch(driver)
        try:
            driver.teardown()
        except Exception:  # noqa: BLE001 - best effort cleanup of mounts
            pass


def watcher_without(capability: str, kind: str, world, view: str) -> Watcher:
    """The watcher as root minus ``capability`` in its bounding set (so in its effective set too)."""
    storage, branch, state = world
    return Watcher(["setpriv", f"--bounding-set=-{capability}", f"--inh-caps=-{capability}", "--",
                    sys.executable, "-c", WATCHER, kind, view, str(branch), str(storage), str(state)])


@pytest.mark.parametrize("kind", ALL)
def test_another_users_read_through_each_view_is_seen_without_ptrace(kind, started, world, two_users):
    """The cache's report, made by a process without CAP_SYS_PTRACE, names the files another user's job has open
    through the view while it has them open; the old /proc scan, in the same process, sees nothing of them."""
    usera, _ = two_users
    _, view = started(kind)
    watcher = watcher_without("sys_ptrace", kind, world, view)
    try:
        assert watcher.method == "fanotify"
        assert watcher.query() == set()
        job = Job([f"{view}/store/a/one.dat", f"{view}/store/b/odd name;$(x).dat"], user=usera)
        try:
            assert watcher.query() == {"/store/a/one.dat", "/store/b/odd name;$(x).dat"}
            assert watcher.query("proc") == set()  # why the old unit needed CAP_SYS_PTRACE
        finally:
            job.close()
        assert watcher.query() == set()
    finally:
        watcher.stop()


@pytest.mark.parametrize("kind", MOUNTED)
def test_an_open_whose_close_merged_with_it_while_the_watch_waited_is_counted(kind, started, world):
    """While the cache is stopped (busy, or its reads of earlier events wait on storage), a job's open and close
    of one file merge into one event; that job still opened the file, and the hit metric must count it."""
    _, view = started(kind)
    watcher = watcher_without("sys_ptrace", kind, world, view)
    try:
        assert watcher.ask("counted") == []
        os.kill(watcher.proc.pid, signal.SIGSTOP)
        try:
            read = subprocess.run([sys.executable, "-c", "import sys; print(len(open(sys.argv[1], 'rb').read()))",
                                   f"{view}/store/a/one.dat"], capture_output=True, text=True, timeout=30)
        finally:
            os.kill(watcher.proc.pid, signal.SIGCONT)
        assert read.stdout.strip() == "1000"
        counted = watcher.ask("counted")
        assert len(counted) == 1 and counted[0].endswith("/store/a/one.dat"), counted
        assert watcher.query() == set()  # and it is not left open
    finally:
        watcher.stop()


@pytest.mark.parametrize("kind", MOUNTED)
def test_a_job_in_its_own_mount_namespace_reading_a_bind_mount_of_the_view_is_seen(kind, started, shared_tmp):
    """Containers and MOUNT_UNDER_SCRATCH give jobs their own mount namespace with the view bound in: the file
    system mark still sees their opens and maps them back; a bind of a subdirectory maps to no wrong LFN."""
    driver, view = started(kind)
    assert watch(driver) is not None
    inside = shared_tmp / "inside"
    inside.mkdir()
    whole = Job([f"{inside}/store/a/one.dat"], prefix=["unshare", "-m", "--propagation", "private", "sh", "-c",
                                                        f"mount --bind {view} {inside} && exec \"$@\"", "sh"])
    part = Job([f"{inside}/two.dat"], prefix=["unshare", "-m", "--propagation", "private", "sh", "-c",
                                              f"mount --bind {view}/store/a {inside} && exec \"$@\"", "sh"])
    try:
        assert open_lfns(driver.lfn_of) == {"/store/a/one.dat"}
    finally:
        whole.close()
        part.close()
    assert open_lfns(driver.lfn_of) == set()


@needs_root
def test_overlayfs_generations_are_watched_as_they_are_mounted(started):
    """A file opened in a generation stays reported after a remount (the job keeps reading the old mount); a
    file opened in the new generation right after the remount is seen without the cache asking in between."""
    driver, view = started("overlayfs")
    assert watch(driver) is not None
    old = Job([f"{view}/store/a/one.dat"])
    try:
        driver.added("/store/a/two.dat")
        driver.refresh()  # a new generation: the view link now points at another overlay mount
        new = Job([f"{view}/store/a/two.dat"])
        try:
            assert open_lfns(driver.lfn_of) == {"/store/a/one.dat", "/store/a/two.dat"}
        finally:
            new.close()
    finally:
        old.close()
    assert open_lfns(driver.lfn_of) == set()


@needs_root
def test_counts_follow_opens_and_closes_by_any_process(started):
    """Two jobs open one file: it stays reported until both closed it; a descriptor inherited by a child and
    closed by it last ends the parent's open too; the daemon's own opens are skipped; deleted files drop out."""
    driver, view = started("symlink")
    assert watch(driver) is not None
    one, two = f"{view}/store/a/one.dat", f"{view}/store/a/two.dat"
    first, second = Job([one]), Job([one])
    first.close()
    assert open_lfns(driver.lfn_of) == {"/store/a/one.dat"}
    second.close()
    assert open_lfns(driver.lfn_of) == set()

    parent = subprocess.Popen([sys.executable, "-c", HANDOFF, two], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout.readline().strip() == "open"
        assert open_lfns(driver.lfn_of) == {"/store/a/two.dat"}
        parent.stdin.close()  # the child closes the descriptor the parent opened, and exits
        assert parent.stdout.readline().strip() == "closed"
        assert open_lfns(driver.lfn_of) == set()  # while the opener still runs
    finally:
        parent.kill()
        parent.wait(10)

    with open(one, "rb"):
        assert open_lfns(driver.lfn_of, skip_pids=frozenset({os.getpid()})) == set()
        assert open_lfns(driver.lfn_of) == {"/store/a/one.dat"}

    job = Job([one])
    try:
        os.unlink(os.path.realpath(one))  # the descriptor now names a deleted file: no LFN to report
        assert open_lfns(driver.lfn_of) == set()
    finally:
        job.close()


@needs_root
def test_a_process_holding_a_file_that_dies_is_forgotten(started):
    """A job killed outright closes its files in the kernel; a holder whose close was missed (queue overflow)
    is dropped once it no longer exists."""
    driver, view = started("symlink")
    found = watch(driver)
    job = Job([f"{view}/store/a/one.dat"])
    job.proc.kill()
    job.proc.wait(10)
    wait_until(lambda: open_lfns(driver.lfn_of) == set(), timeout=5, what="the killed job's file forgotten")
    assert found is not None and found.open_paths() == []
    missed = readers.OpenFile(str(Path(view, "store/a/two.dat").resolve()))  # a close event that never came
    missed.opened(job.proc.pid)
    missed.opened(os.getpid())
    assert missed.prune() and list(missed.holders) == [os.getpid()]  # the dead holder goes, the live one stays
    missed.closed(os.getpid())
    assert not missed.prune()


@needs_root
def test_without_cap_sys_admin_the_proc_scan_is_used_and_logged(started, world, caplog):
    """No fanotify (no CAP_SYS_ADMIN): the watcher says so and falls back to the /proc scan, which still sees
    the node's own user's jobs."""
    _, view = started("symlink")
    watcher = watcher_without("sys_admin", "symlink", world, view)
    try:
        assert watcher.method == "proc"
        job = Job([f"{view}/store/a/one.dat"])
        try:
            assert watcher.query() == {"/store/a/one.dat"}
        finally:
            job.close()
    finally:
        watcher.stop()
    assert "fanotify unavailable" in watcher.log and "scanning /proc" in watcher.log
    with caplog.at_level(logging.INFO, logger="htda.cache.readers"):
        driver, _ = started("symlink")
        watch(driver)
    assert any("fanotify on" in r.getMessage() for r in caplog.records)


def test_a_fake_proc_tree_with_hostile_links_and_vanishing_pids(tmp_path):
    proc = tmp_path / "proc"
    (proc / "1" / "fd").mkdir(parents=True)
    (proc / "2").mkdir()  # a process without a readable fd directory
    (proc / "self").mkdir()
    os.symlink("/view/store/ok.root", proc / "1" / "fd" / "3")
    os.symlink("/view/store/../../etc/shadow", proc / "1" / "fd" / "4")  # never an LFN
    os.symlink("socket:[1234]", proc / "1" / "fd" / "5")
    os.symlink("/view/store/gone.root (deleted)", proc / "1" / "fd" / "6")
    lfn_of = lambda p: p[len("/view"):] if p.startswith("/view/") else None
    assert open_lfns(lfn_of, proc=str(proc)) == {"/store/ok.root"}
    assert scan_proc(lfn_of, str(proc), skip_pids=frozenset({1})) == set()


def test_fanotify_events_are_parsed_and_unknown_layouts_stop_the_parse():
    good = readers.METADATA.pack(readers.METADATA.size, 3, 0, readers.METADATA.size, readers.FAN_OPEN, 7, 42)
    bad = readers.METADATA.pack(readers.METADATA.size, 99, 0, readers.METADATA.size, readers.FAN_OPEN, 8, 43)
    assert readers.parse_events(good + bad + good) == [(readers.FAN_OPEN, 7, 42)]


def test_the_base_driver_maps_view_and_storage_paths(tmp_path):
    driver = SymlinkDriver(str(tmp_path / "view"), [], str(tmp_path / "storage"), str(tmp_path))
    assert driver.lfn_of(f"{tmp_path}/view/store/x.root") == "/store/x.root"
    assert driver.lfn_of(f"{tmp_path}/storage/store/x.root") == "/store/x.root"
    assert driver.lfn_of(f"{tmp_path}/viewer/store/x.root") is None  # a sibling with the same prefix
    assert driver.lfn_of("/etc/passwd") is None
