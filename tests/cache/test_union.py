"""Union views on real mounts: every file reads the same through the view as from storage,
before staging, after staging, after eviction, and with the daemon killed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.request

import pytest

from htda.cache.backends.http import HTTPStorage
from htda.cache.backends.posix import PosixDevice, PosixStorage
from htda.cache.staging import Stager, StagingJob
from htda.cache.union import mount_type, unmount
from htda.cache.union.base import UnionError
from htda.cache.union.mergerfs import (
    MergerfsDriver,
    kernel_version,
    mergerfs_version,
    parse_version,
    passthrough_supported,
)
from htda.cache.union.overlayfs import OverlayfsDriver
from htda.cache.union.symlink import SymlinkDriver
from htda.node.client import Client
from testkit.clock import FakeClock
from testkit.fakes import PeerStandIn
from testkit.nodes import SECRET, wait_until
from testkit.processes import kill_where
from testkit.storage import copy_tree, make_tree

IS_ROOT = os.geteuid() == 0
HAS_FUSE = os.path.exists("/dev/fuse") and shutil.which("mergerfs") is not None
needs_root = pytest.mark.skipif(not IS_ROOT, reason="overlayfs mounts need root")
needs_mergerfs = pytest.mark.skipif(not (IS_ROOT and HAS_FUSE), reason="needs root, /dev/fuse and mergerfs")

DRIVERS = {"mergerfs": MergerfsDriver, "overlayfs": OverlayfsDriver, "symlink": SymlinkDriver}
SKIPS = {"mergerfs": needs_mergerfs, "overlayfs": needs_root, "symlink": pytest.mark.skipif(False, reason="")}


@pytest.fixture
def views():
    """Drivers started by a test are torn down after it, whatever happened."""
    started = []
    yield started
    for driver in started:
        try:
            driver.teardown()
        except Exception:  # noqa: BLE001 - best effort cleanup of mounts
            pass
        release_view(driver.view)


def release_view(view) -> None:
    """Leave nothing of a test's view behind: a mount a plain unmount could not take (busy) is detached, and a
    mergerfs still serving it (a detached FUSE mount keeps its daemon while the kernel holds a file of it) is
    stopped, so that no process outlives the test and pytest can remove its directory."""
    view = str(view)
    if mount_type(view) is not None:
        try:
            unmount(view, lazy=True)
        except Exception:  # noqa: BLE001 - best effort cleanup of mounts
            pass
    kill_where(lambda proc: proc.comm == "mergerfs" and view.encode() in proc.argv)


def read_view(view, lfn: str) -> bytes:
    with open(os.path.join(view, lfn.lstrip("/")), "rb") as fh:
        return fh.read()


def assert_view_matches(view, files) -> None:
    for lfn, data in files.items():
        assert read_view(view, lfn) == data, f"{lfn} differs through the view"


def served_from_cache(driver, view, lfn: str, device: PosixDevice) -> bool | None:
    path = os.path.join(view, lfn.lstrip("/"))
    if driver == "mergerfs":
        return os.getxattr(path, "user.mergerfs.fullpath").decode().startswith(device.data_dir)
    if driver == "symlink":
        return os.readlink(path).startswith(device.data_dir)
    return None  # overlayfs does not say which layer a file came from


def started_view(driver: str, root, tmp_path, views, grace: str = "0"):
    """A started view of ``driver`` over a fresh device and ``root``: (its view path, the driver, the device)."""
    device = PosixDevice(str(tmp_path / "dev"))
    view = str(tmp_path / "view")
    union = DRIVERS[driver](view, device.branches(), str(root), str(tmp_path / "state"),
                            {"min_interval": "0", "grace": grace})
    views.append(union)
    union.start([])
    return view, union, device


@pytest.mark.parametrize("driver", [pytest.param(n, marks=SKIPS[n]) for n in DRIVERS])
def test_view_serves_storage_bytes_before_and_after_staging_and_eviction(driver, source_tree, tmp_path, views):
    root, files = source_tree
    view, union, device = started_view(driver, root, tmp_path, views)
    assert_view_matches(view, files)
    storage, stager = PosixStorage(str(root)), Stager()
    staged = sorted(files)[::2]
    for lfn in staged:
        stager.stage(StagingJob(lfn, storage, device))
        union.added(lfn)
    union.refresh()
    assert_view_matches(view, files)
    for lfn in staged:
        assert served_from_cache(driver, view, lfn, device) in (True, None)
    for lfn in staged[:2]:
        union.removing(lfn)
        device.delete(lfn)
    union.refresh()
    assert_view_matches(view, files)
    for lfn in staged[:2]:
        assert served_from_cache(driver, view, lfn, device) in (False, None)


@needs_mergerfs
def test_mergerfs_writes_go_to_storage_and_new_copies_show_at_once(source_tree, tmp_path, views):
    root, files = source_tree
    device = PosixDevice(str(tmp_path / "dev"))
    view = tmp_path / "view"
    union = MergerfsDriver(str(view), device.branches(), str(root), str(tmp_path / "state"))
    views.append(union)
    union.start([])
    (view / "store/a/out.txt").write_text("written by a job")
    assert (root / "store/a/out.txt").read_text() == "written by a job"
    assert not os.path.exists(os.path.join(device.data_dir, "store/a/out.txt"))
    Stager().stage(StagingJob("/store/a/one.dat", PosixStorage(str(root)), device))  # no refresh needed
    assert served_from_cache("mergerfs", str(view), "/store/a/one.dat", device)
    # a restarted daemon adopts the mount and sets its branches at run time
    again = MergerfsDriver(str(view), device.branches(), str(root), str(tmp_path / "state"))
    again.start(["/store/a/one.dat"])
    assert mount_type(str(view)) == "fuse.mergerfs"
    assert_view_matches(str(view), files)


@needs_root
def test_overlayfs_remount_keeps_open_files_working(source_tree, tmp_path, views):
    root, files = source_tree
    device = PosixDevice(str(tmp_path / "dev"))
    view = tmp_path / "view"
    union = OverlayfsDriver(str(view), device.branches(), str(root), str(tmp_path / "state"),
                            {"min_interval": "0", "grace": "0"})
    views.append(union)
    union.start([])
    first = os.path.realpath(view)
    held_open = open(view / "store/a/one.dat", "rb")
    try:
        lfn = "/store/a/one.dat"
        Stager().stage(StagingJob(lfn, PosixStorage(str(root)), device))
        union.added(lfn)
        union.refresh()  # new mount, symlink swapped, old mount detached lazily
        assert os.path.realpath(view) != first
        assert mount_type(first) is None  # detached (grace 0), yet the open file still reads
        assert held_open.read() == files[lfn]
        assert_view_matches(str(view), files)
    finally:
        held_open.close()
    with pytest.raises(OSError):
        open(view / "store/new.txt", "w")  # read-only: jobs write to storage by its own path


def cache_section(tmp_path, peer, storage_root, view, driver, **extra):
    section = {"storage": "posix", "storage_location": str(storage_root),
               "devices": [{"path": str(tmp_path / "dev0")}], "coordinators": [peer.url], "locators": [peer.url],
               "cycle": 0.2, "retry_delay": 0.1, "union": driver, "view": str(view),
               "view_options": "min_interval=0;grace=0"}
    section.update(extra)
    return {"cache": section}


@pytest.fixture
def peer():
    standin = PeerStandIn(SECRET.encode()).start()
    yield standin
    standin.stop()


def cleanup_view(driver: str, view, tmp_path) -> None:
    if driver == "overlayfs":
        OverlayfsDriver(str(view), [], None, str(tmp_path / "data" / "k")).teardown()
    elif driver == "mergerfs":
        try:
            unmount(str(view))
        finally:
            release_view(view)


@pytest.mark.slow
@pytest.mark.parametrize("driver", [pytest.param(n, marks=SKIPS[n]) for n in DRIVERS])
def test_view_keeps_serving_after_the_daemon_is_killed(driver, source_tree, tmp_path, node_factory, peer):
    root, files = source_tree
    peer.assign([(lfn, 1.0) for lfn in files])
    view = tmp_path / "view"
    node = node_factory("k", ["cache"], sections=cache_section(tmp_path, peer, root, view, driver))
    try:
        wait_until(lambda: len(node.get("/api/v1/cache/files")["files"]) == len(files), timeout=20,
                   what="all files staged")
        assert_view_matches(str(view), files)
        node.kill()
        assert_view_matches(str(view), files)  # the daemon is gone; the view is not
        node.start()
        wait_until(lambda: node.get("/api/v1/cache/files")["total"] == len(files), what="index rebuilt")
        assert_view_matches(str(view), files)
        node.stop()  # a clean stop (SIGTERM) leaves the view serving too
        assert_view_matches(str(view), files)
    finally:
        node.stop()
        cleanup_view(driver, view, tmp_path)


@pytest.mark.slow
@needs_mergerfs
def test_daemon_killed_mid_staging_serves_no_bad_byte(tmp_path, node_factory, peer, http_server):
    files = make_tree(http_server.root, {"/store/slow.dat": 2_000_000, "/store/quick.dat": 10_000})
    http_server.delay = 0.02  # ~3 MB/s: the big copy takes a while
    peer.assign([("/store/slow.dat", 2.0), ("/store/quick.dat", 1.0)])
    view = tmp_path / "view"
    section = cache_section(tmp_path, peer, http_server.url, view, "mergerfs", storage="http",
                            view_storage=str(http_server.root))
    node = node_factory("m", ["cache"], sections=section)
    try:
        def copying():
            active = node.get("/api/v1/cache/staging")["active"]
            return any(j["lfn"] == "/store/slow.dat" and j["done_bytes"] > 100_000 for j in active)

        wait_until(copying, timeout=20, what="the slow copy under way")
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(10)
        staging_dir = tmp_path / "dev0/staging"
        assert os.listdir(staging_dir), "the kill should have left a partial temporary file"
        assert not (tmp_path / "dev0/data/store/slow.dat").exists()
        assert_view_matches(str(view), files)  # storage bytes, never the partial copy
        http_server.delay = 0.0
        node.start()
        wait_until(lambda: node.get("/api/v1/cache/files")["total"] == 2, timeout=20, what="both staged")
        assert (tmp_path / "dev0/data/store/slow.dat").read_bytes() == files["/store/slow.dat"]
        assert os.listdir(staging_dir) == []
        assert_view_matches(str(view), files)
        held = {f["lfn"]: f["size"] for f in node.get("/api/v1/cache/files")["files"]}
        assert held == {lfn: len(d) for lfn, d in files.items()}
    finally:
        node.stop()
        cleanup_view("mergerfs", view, tmp_path)


def test_http_storage_has_no_local_root(http_server):
    assert HTTPStorage(http_server.url).local_root() is None


@needs_root
def test_mount_type_sees_mounts(tmp_path, tmpfs):
    assert mount_type(str(tmp_path)) is None
    assert mount_type(str(tmpfs(1 << 20))) == "tmpfs"


@pytest.mark.slow
@needs_mergerfs
@pytest.mark.parametrize("kind", ["xrootd", "http"])
def test_view_with_remote_storage_matches_it(kind, source_tree, tmp_path, inprocess_node, peer, request):
    """A node fetching from a real xrootd or HTTP server: the view (over the server's export) reads the same."""
    root, files = source_tree
    server = request.getfixturevalue("xrootd_server" if kind == "xrootd" else "http_server")
    copy_tree(root, server.root)
    location = server.url + "/" if kind == "xrootd" else server.url
    view = tmp_path / "view"
    peer.assign([(lfn, 1.0) for lfn in files])
    section = cache_section(tmp_path, peer, location, view, "mergerfs", storage=kind, view_storage=str(server.root))
    try:
        node = inprocess_node("r", ["cache"], sections=section)
        assert_view_matches(str(view), files)  # before (or while) staging
        client = Client(SECRET.encode())
        wait_until(lambda: client.get(f"{node.url}/api/v1/cache/files")["total"] == len(files), timeout=30,
                   what=f"all files staged from {kind}")
        assert_view_matches(str(view), files)
        for lfn in files:
            assert (tmp_path / "dev0/data" / lfn.lstrip("/")).read_bytes() == files[lfn]
    finally:
        try:
            unmount(str(view))
        except UnionError:  # the node still runs (copies, revalidation, its reads watch): detach instead
            unmount(str(view), lazy=True)
        release_view(view)


@pytest.mark.parametrize("driver", [pytest.param(n, marks=SKIPS[n]) for n in DRIVERS])
def test_a_job_reading_through_the_view_is_seen_with_the_lfn_it_reads(driver, source_tree, tmp_path, views):
    """What /proc shows for a file open through each view maps back to its LFN (storage reads, issue 6)."""
    import subprocess
    import sys

    from htda.cache.readers import open_lfns

    root, _ = source_tree
    view, union, _ = started_view(driver, root, tmp_path, views, grace="60")  # detached mounts' files show no prefix
    lfn = "/store/a/two.dat"
    assert open_lfns(union.lfn_of) == set()  # the node's first scan: from here on opens are seen (fanotify)
    job = subprocess.Popen([sys.executable, "-c", "import sys; f = open(sys.argv[1], 'rb'); f.read(1); "
                            "print(flush=True); sys.stdin.read()", os.path.join(view, lfn.lstrip("/"))],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        job.stdout.readline()  # the file is open
        union.added("/store/b/three.dat")  # overlayfs remounts: the open file stays on the retired mount
        union.refresh()
        assert lfn in open_lfns(union.lfn_of)
    finally:
        job.stdin.close()
        job.wait(10)


def _counter(metrics: str, name: str) -> dict[str, float]:
    """``{source: value}`` of one labelled counter in Prometheus text."""
    found = {}
    for line in metrics.splitlines():
        if line.startswith(name + '{source="'):
            labels, value = line.rsplit(" ", 1)
            found[labels.split('"')[1]] = float(value)
    return found


@pytest.mark.slow
@needs_mergerfs
def test_opens_through_the_view_are_counted_by_where_they_are_read_from(source_tree, tmp_path, node_factory, peer):
    root, files = source_tree
    cached, uncached = sorted(files)[:2]
    peer.assign([(cached, 1.0)])
    view = tmp_path / "view"
    node = node_factory("o", ["cache"], sections=cache_section(tmp_path, peer, root, view, "mergerfs"))
    try:
        wait_until(lambda: node.get("/api/v1/cache/files")["total"] == 1, timeout=20, what="one file staged")
        # three jobs (processes other than the node), each opening its file twice as uproot's threads do
        job = ("import sys; a, b = open(sys.argv[1], 'rb'), open(sys.argv[1], 'rb'); "
               "sys.stdout.write(str(len(a.read())))")
        for lfn in (cached, uncached, cached):
            done = subprocess.run([sys.executable, "-c", job, str(view / lfn.lstrip("/"))], capture_output=True,
                                  text=True, timeout=30)
            assert done.stdout == str(len(files[lfn]))

        def counted():
            with urllib.request.urlopen(f"{node.url}/metrics", timeout=10) as answer:
                text = answer.read().decode()
            return (_counter(text, "htda_cache_job_opens_total"),
                    _counter(text, "htda_cache_job_opened_bytes_total"))

        wanted = ({"cache": 2.0, "storage": 1.0},
                  {"cache": 2.0 * len(files[cached]), "storage": float(len(files[uncached]))})
        wait_until(lambda: counted() == wanted, timeout=10, what=f"the opens counted ({counted()})")
    finally:
        node.stop()
        cleanup_view("mergerfs", view, tmp_path)


def test_the_symlink_view_links_files_new_in_storage_at_its_next_rescan(tmp_path, views):
    """Storage is listed again every ``rescan_interval`` seconds of the cache's clock, not at every refresh."""
    clock, root = FakeClock(), tmp_path / "storage"
    make_tree(root, {"/store/a.root": 10})
    view = str(tmp_path / "view")
    union = SymlinkDriver(view, [], str(root), str(tmp_path / "state"), {"rescan_interval": "300"}, clock=clock)
    views.append(union)
    union.start([])
    make_tree(root, {"/store/b.root": 10}, seed=8)
    for step in (0.0, 299.9):
        clock.advance(step)
        union.refresh()
        assert os.path.lexists(os.path.join(view, "store/a.root"))
        assert not os.path.lexists(os.path.join(view, "store/b.root"))
    clock.advance(0.1)
    union.refresh()
    assert read_view(view, "/store/b.root") == (root / "store/b.root").read_bytes()


def test_versions_are_read_as_the_tools_print_them():
    assert parse_version("mergerfs version: 2.33.5\n") == (2, 33, 5)
    assert parse_version("mergerfs v2.42.0\n\nhttps://github.com/trapexit/mergerfs") == (2, 42, 0)
    assert parse_version("no version here") is None
    assert kernel_version("6.18.44-fc-v782") == (6, 18) and kernel_version("5.10.0-28-amd64") == (5, 10)
    assert passthrough_supported((2, 40), (6, 9)) and passthrough_supported((3, 0, 1), (7, 0))
    assert not passthrough_supported((2, 33, 5), (6, 18)) and not passthrough_supported((2, 42, 0), (6, 8))


def passthrough_of(view: str) -> str | None:
    """What the mounted mergerfs says of passthrough.io (None: a mergerfs without the option)."""
    try:
        return os.getxattr(os.path.join(view, ".mergerfs"), "user.mergerfs.passthrough.io").decode()
    except OSError:
        return None


@needs_mergerfs
def test_mergerfs_reads_pass_through_to_the_kernel_where_the_installed_mergerfs_can(source_tree, tmp_path,
                                                                                      views):
    """Auto: passthrough for read-only opens exactly where mergerfs and the kernel have it; reads are right."""
    root, files = source_tree
    view, _, _ = started_view("mergerfs", root, tmp_path, views)
    version = mergerfs_version()
    assert version is not None
    expected = "ro" if passthrough_supported(version, kernel_version()) else None
    assert passthrough_of(view) == expected
    assert_view_matches(view, files)


@needs_mergerfs
def test_mergerfs_passthrough_option_is_checked(source_tree, tmp_path, views):
    root, _ = source_tree
    union = MergerfsDriver(str(tmp_path / "view"), [], str(root), str(tmp_path / "state"), {"passthrough": "yes"})
    views.append(union)
    with pytest.raises(UnionError, match="passthrough must be one of auto, on, off, not 'yes'"):
        union.start([])
    off = MergerfsDriver(str(tmp_path / "off"), [], str(root), str(tmp_path / "state-off"), {"passthrough": "off"})
    views.append(off)
    off.start([])
    assert passthrough_of(str(tmp_path / "off")) in (None, "off")
