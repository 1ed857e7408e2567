"""Copies keep their source's permissions (issue 12): two real ordinary users, the kernel deciding.

What ``usera`` and ``userb`` may read and list in storage, they may read and
list through every union view, on the cache device and in the staging area,
and nothing more; copies of remote files follow the site's rule.  Every check
runs a command as the user (``tests/users.py``), so no reading of HTDA's code
decides what the kernel allows.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import htda
from htda.cache.backends.http import HTTPStorage
from htda.cache.backends.posix import LEGACY_XATTR, META_XATTR, PosixDevice, PosixStorage
from htda.cache.backends.xrootd import XRootDStorage
from htda.cache.ownership import RemoteRule
from htda.cache.staging import Stager, StagingJob
from htda.cache.union import unmount
from htda.node import plugins
from htda.node.client import Client, HTTPStatusError
from testkit.fakes import PeerStandIn
from testkit.nodes import SECRET, wait_until
from testkit.storage import RangeHTTPServer, after_each_chunk, copy_tree
from tests.users import run_as

HAS_FUSE = os.path.exists("/dev/fuse") and shutil.which("mergerfs") is not None
DRIVERS = [pytest.param("mergerfs", marks=pytest.mark.skipif(not HAS_FUSE, reason="needs /dev/fuse and mergerfs")),
           "overlayfs", "symlink"]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the multi-user tests run as root")

SECRET_LFN, OPEN_LFN, MINE_LFN = "/store/private/secret.txt", "/store/public/open.txt", "/store/usera/mine.txt"
WORLD_LFN, GROUP_LFN = "/store/shared/world.txt", "/store/group/grp.txt"
DIRS = ["/", "/store", "/store/private", "/store/public", "/store/usera", "/store/shared", "/store/group"]


def build_storage(root: Path, usera, userb) -> list[str]:
    """The reviewer's storage: userb's private and public files, usera's own, root's world-readable file and
    one readable by userb's group alone.  Returns the LFNs."""
    layout = {  # lfn: (owner, group, file mode, directory mode)
        SECRET_LFN: (userb.uid, userb.gid, 0o600, 0o700),
        OPEN_LFN: (userb.uid, userb.gid, 0o644, 0o755),
        MINE_LFN: (usera.uid, usera.gid, 0o600, 0o700),
        WORLD_LFN: (0, 0, 0o644, 0o755),
        GROUP_LFN: (0, userb.gid, 0o640, 0o750),
    }
    root.mkdir(mode=0o755)
    for lfn, (uid, gid, mode, dir_mode) in layout.items():
        path = root / lfn.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"the bytes of {lfn}\n")
        for p, m in ((path, mode), (path.parent, dir_mode)):
            os.chown(p, uid, gid)
            os.chmod(p, m)
    return list(layout)


PROBE = ('for a; do p="${a#?:}"; case "$a" in r:*) cat -- "$p" ;; l:*) ls -A -- "$p" ;; esac >/dev/null 2>&1 '
         '&& echo 1 || echo 0; done')


def access(user, root, lfns: list[str], dirs: list[str] = DIRS) -> dict[str, bool]:
    """What ``user`` may do beneath ``root``: read each file, list each directory (as that user)."""
    probes = [f"r:{root}{lfn}" for lfn in lfns] + [f"l:{str(root).rstrip('/')}{d}" for d in dirs]
    done = run_as(user, ["sh", "-c", PROBE, "sh", *probes])
    answers = done.stdout.split()
    assert len(answers) == len(probes), done.stderr
    names = [f"read {lfn}" for lfn in lfns] + [f"list {d}" for d in dirs]
    return dict(zip(names, (a == "1" for a in answers)))


def can(user, argv: list[str]) -> bool:
    return run_as(user, argv).returncode == 0


@pytest.fixture
def storage_root(shared_tmp, two_users):
    """POSIX storage other users can reach (pytest's tmp_path is root's alone); yields (root, LFNs)."""
    root = shared_tmp / "storage"
    return root, build_storage(root, *two_users)


def stage_all(storage, device, lfns) -> None:
    stager = Stager()
    for lfn in lfns:
        stager.stage(StagingJob(lfn, storage, device))


def test_the_reviewers_storage_is_what_it_claims(storage_root, two_users):
    """The premise of every other test here: storage itself gives each user what the layout says."""
    root, lfns = storage_root
    usera, userb = two_users
    a, b = access(usera, root, lfns), access(userb, root, lfns)
    assert not a[f"read {SECRET_LFN}"] and not a["list /store/private"] and not a[f"read {GROUP_LFN}"]
    assert a[f"read {MINE_LFN}"] and a[f"read {OPEN_LFN}"] and a[f"read {WORLD_LFN}"]
    assert b[f"read {SECRET_LFN}"] and b[f"read {GROUP_LFN}"] and not b[f"read {MINE_LFN}"]


def test_copies_and_their_directories_carry_the_source_perms(storage_root, shared_tmp, two_users):
    root, lfns = storage_root
    device = PosixDevice(str(shared_tmp / "dev"))
    stage_all(PosixStorage(str(root)), device, lfns)
    for lfn in lfns:
        src, copy = os.stat(root / lfn.lstrip("/")), os.stat(Path(device.data_dir) / lfn.lstrip("/"))
        assert (copy.st_uid, copy.st_gid) == (src.st_uid, src.st_gid), lfn
        assert stat.S_IMODE(copy.st_mode) == stat.S_IMODE(src.st_mode) & ~0o222, lfn  # copies are read-only
        for d in Path(lfn).parents:
            src_dir, copy_dir = os.stat(root / str(d).lstrip("/")), os.stat(Path(device.data_dir) / str(d).lstrip("/"))
            assert (copy_dir.st_uid, copy_dir.st_gid, copy_dir.st_mode) == \
                (src_dir.st_uid, src_dir.st_gid, src_dir.st_mode), d
    for user in two_users:
        assert access(user, device.data_dir, lfns) == access(user, root, lfns), user.name
        assert not can(user, ["ls", device.path]) and not can(user, ["ls", device.staging_dir])


def test_a_partial_copy_is_root_s_alone_whatever_the_source(storage_root, shared_tmp, two_users):
    """While bytes arrive, the temporary file (even of a world-readable source) is 0600 root in a 0700 dir."""
    root, _ = storage_root
    device = PosixDevice(str(shared_tmp / "dev"))
    seen: list[tuple[str, os.stat_result, dict[str, bool]]] = []

    def look(lfn: str) -> None:
        [name] = os.listdir(device.staging_dir)
        path = os.path.join(device.staging_dir, name)
        seen.append((lfn, os.stat(path), {u.name: can(u, ["cat", path]) for u in two_users}))

    stager = Stager()
    for lfn in (SECRET_LFN, WORLD_LFN):
        storage = after_each_chunk(PosixStorage(str(root)), lambda lfn=lfn: look(lfn))
        stager.stage(StagingJob(lfn, storage, device))
    assert {lfn for lfn, _, _ in seen} == {SECRET_LFN, WORLD_LFN}
    for lfn, st, readable in seen:
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600), lfn
        assert readable == {"usera": False, "userb": False}, lfn
    assert stat.S_IMODE(os.stat(device.staging_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(device.path).st_mode) == 0o711


def start_view(driver: str, device: PosixDevice, storage: str, where: Path, views: list):
    union = plugins.load("htda.union", driver)(str(where / "view"), device.branches(), storage, str(where / "state"),
                                               {"min_interval": "0", "grace": "0"})
    views.append(union)
    union.start([])
    return union


@pytest.fixture
def views():
    started: list = []
    yield started
    for union in started:
        try:
            union.teardown()
        except Exception:  # noqa: BLE001 - best-effort cleanup of mounts
            pass


def staged_in_view(union, storage, device, lfns) -> None:
    stage_all(storage, device, lfns)
    for lfn in lfns:
        union.added(lfn)
    union.refresh()


@pytest.mark.parametrize("driver", DRIVERS)
def test_each_view_gives_each_user_what_storage_gives(driver, storage_root, shared_tmp, two_users, views):
    root, lfns = storage_root
    device = PosixDevice(str(shared_tmp / "dev"))
    union = start_view(driver, device, str(root), shared_tmp, views)
    held = [lfn for lfn in lfns if lfn != OPEN_LFN]  # one file still from storage, beside copies
    staged_in_view(union, PosixStorage(str(root)), device, held)
    view = shared_tmp / "view"
    for user in two_users:
        assert access(user, view, lfns) == access(user, root, lfns), user.name
    usera, userb = two_users
    assert run_as(usera, ["cat", str(view / MINE_LFN.lstrip("/"))]).stdout == f"the bytes of {MINE_LFN}\n"
    assert run_as(usera, ["cat", str(view / SECRET_LFN.lstrip("/"))]).returncode != 0
    assert run_as(userb, ["cat", str(view / SECRET_LFN.lstrip("/"))]).stdout == f"the bytes of {SECRET_LFN}\n"


@pytest.mark.skipif(not HAS_FUSE, reason="needs /dev/fuse and mergerfs")
def test_files_written_through_mergerfs_belong_to_their_writer(storage_root, shared_tmp, two_users, views):
    root, lfns = storage_root
    usera, userb = two_users
    device = PosixDevice(str(shared_tmp / "dev"))
    union = start_view("mergerfs", device, str(root), shared_tmp, views)
    staged_in_view(union, PosixStorage(str(root)), device, [MINE_LFN])  # usera's directory is on the device too
    out = shared_tmp / "view/store/usera/out.txt"
    assert can(usera, ["sh", "-c", f"echo result > {out}"])
    written = os.stat(root / "store/usera/out.txt")
    assert (written.st_uid, written.st_gid) == (usera.uid, usera.gid)
    assert not (Path(device.data_dir) / "store/usera/out.txt").exists()
    assert not can(userb, ["sh", "-c", f"echo forged > {shared_tmp / 'view/store/usera/evil.txt'}"])


MERGERFS_STARTER = """
import sys
from htda.cache.backends.posix import PosixDevice
from htda.cache.union.mergerfs import MergerfsDriver
MergerfsDriver(sys.argv[1], PosixDevice(sys.argv[2]).branches(), sys.argv[3], sys.argv[4]).start([])
"""


@pytest.mark.skipif(not HAS_FUSE, reason="needs /dev/fuse and mergerfs")
def test_a_mergerfs_that_cannot_act_as_its_callers_writes_nothing(storage_root, shared_tmp, two_users):
    """Started without CAP_SETUID/CAP_SETGID (a unit that dropped them), mergerfs would create files as root:
    the driver mounts storage read-only instead, and reads still work."""
    root, _ = storage_root
    usera, _ = two_users
    view = shared_tmp / "view"
    started = subprocess.run(["setpriv", "--bounding-set=-setuid,-setgid", "--", sys.executable, "-c",
                              MERGERFS_STARTER, str(view), str(shared_tmp / "dev"), str(root),
                              str(shared_tmp / "state")], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(Path(htda.__file__).resolve().parents[1])})
    try:
        assert started.returncode == 0, started.stderr
        assert not can(usera, ["sh", "-c", f"echo result > {view / 'store/usera/out.txt'}"])
        assert not (root / "store/usera/out.txt").exists()
        assert run_as(usera, ["cat", str(view / MINE_LFN.lstrip("/"))]).stdout == f"the bytes of {MINE_LFN}\n"
    finally:
        unmount(str(view))


@pytest.fixture(params=["xrootd", "http"])
def remote(request, shared_tmp):
    """A real XRootD or HTTP server exporting a local directory; yields (storage URL, exported directory)."""
    if request.param == "xrootd":
        server = request.getfixturevalue("xrootd_server")
        yield server.url + "/", server.root
        return
    (shared_tmp / "http").mkdir(mode=0o755)
    server = RangeHTTPServer(shared_tmp / "http").start()
    try:
        yield server.url, server.root
    finally:
        server.stop()


def remote_storage(url: str, rule: RemoteRule | None = None):
    cls = XRootDStorage if url.startswith("root://") else HTTPStorage
    return cls(url, {"remote_rule": rule} if rule else {})


def export(storage_root, exported: Path) -> list[str]:
    """The storage tree on the remote server, readable by the server (remote files have no local owner)."""
    root, lfns = storage_root
    copy_tree(root, exported)
    for path in [exported, *exported.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return lfns


def test_remote_copies_are_root_s_alone_by_default(remote, storage_root, shared_tmp, two_users):
    url, exported = remote
    lfns = export(storage_root, exported)
    device = PosixDevice(str(shared_tmp / "dev"))
    stage_all(remote_storage(url), device, lfns)
    for lfn in lfns:
        st = os.stat(Path(device.data_dir) / lfn.lstrip("/"))
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o400), lfn
    nothing = {key: False for key in access(two_users[0], device.data_dir, lfns, DIRS[1:])}
    for user in two_users:
        assert access(user, device.data_dir, lfns, DIRS[1:]) == nothing, user.name


@pytest.mark.parametrize("driver", DRIVERS)
def test_remote_copies_follow_the_site_rule_through_every_view(driver, remote, storage_root, shared_tmp, two_users,
                                                               views):
    """``remote_group = usera's group, 0640/0750``: usera reads every copy, userb none, on the device and
    through the view (over the exported directory, as a site's view over an xrootdfs or NFS mount)."""
    url, exported = remote
    lfns = export(storage_root, exported)
    usera, userb = two_users
    device = PosixDevice(str(shared_tmp / "dev"))
    union = start_view(driver, device, str(exported), shared_tmp, views)
    staged_in_view(union, remote_storage(url, RemoteRule(0, usera.gid, 0o640, 0o750)), device, lfns)
    for where in (Path(device.data_dir), shared_tmp / "view"):
        assert access(usera, where, lfns, []) == {f"read {lfn}": True for lfn in lfns}, where
        assert access(userb, where, lfns, []) == {f"read {lfn}": False for lfn in lfns}, where
    assert not can(userb, ["ls", str(Path(device.data_dir) / "store/private")])


def test_no_one_puts_a_file_in_front_of_anothers_in_a_sticky_directory(shared_tmp, two_users):
    """In a shared 1777 directory usera cannot replace userb's file in storage, so it must not be able to put
    one in front of it on the device either (the copy of the directory holds only what was cached)."""
    usera, userb = two_users
    root = shared_tmp / "storage"
    scratch = root / "scratch"
    scratch.mkdir(parents=True)
    os.chmod(scratch, 0o1777)
    for name in ("cached.txt", "theirs.txt"):
        assert can(userb, ["sh", "-c", f"echo userb > {scratch / name}"])
    device = PosixDevice(str(shared_tmp / "dev"))
    stage_all(PosixStorage(str(root)), device, ["/scratch/cached.txt"])
    assert not can(usera, ["sh", "-c", f"echo forged > {scratch / 'theirs.txt'}"])  # storage's own rule
    assert not can(usera, ["sh", "-c", f"echo forged > {Path(device.data_dir) / 'scratch/theirs.txt'}"])
    assert can(usera, ["ls", str(Path(device.data_dir) / "scratch")])  # listing stays as in storage


UNPRIVILEGED_STAGER = """
import sys
from htda.cache.backends.http import HTTPStorage
from htda.cache.backends.posix import PosixDevice, PosixStorage
from htda.cache.staging import Stager, StagingJob
from htda.cache.union.symlink import SymlinkDriver
device, storage, stager = PosixDevice(sys.argv[1] + "/dev"), PosixStorage(sys.argv[2]), Stager()
stager.stage(StagingJob(sys.argv[4], HTTPStorage(sys.argv[3]), device))
for lfn in sys.argv[5:]:
    stager.stage(StagingJob(lfn, storage, device))
SymlinkDriver(sys.argv[1] + "/view", device.branches(), sys.argv[2], sys.argv[1] + "/state").start(sys.argv[5:])
"""


def test_an_unprivileged_node_keeps_copies_its_own_and_never_wider(storage_root, shared_tmp, two_users):
    """A node that cannot give files away (not root) owns its copies; only what storage lets everyone read,
    everyone reads, on the device and through its symlink view; the remote rule's root-only default does not
    stop it from staging."""
    root, _ = storage_root
    usera, userb = two_users
    (shared_tmp / "http").mkdir(mode=0o755)
    copy_tree(root / "store/shared", shared_tmp / "http/store/remote")
    server = RangeHTTPServer(shared_tmp / "http").start()
    node_dir = shared_tmp / "unprivileged"
    node_dir.mkdir()
    os.chown(node_dir, usera.uid, usera.gid)
    try:
        argv = [sys.executable, "-c", UNPRIVILEGED_STAGER, str(node_dir), str(root), server.url,
                "/store/remote/world.txt", WORLD_LFN, MINE_LFN]
        done = run_as(usera, argv, reach_as_root=True,
                      env={"PYTHONPATH": str(Path(htda.__file__).resolve().parents[1])})
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    data = node_dir / "dev/data"
    modes = {lfn: os.stat(data / lfn.lstrip("/")) for lfn in (WORLD_LFN, MINE_LFN)}
    assert {lfn: (st.st_uid, stat.S_IMODE(st.st_mode)) for lfn, st in modes.items()} == {
        WORLD_LFN: (usera.uid, 0o404), MINE_LFN: (usera.uid, 0o400)}
    remote_copy = os.stat(data / "store/remote/world.txt")
    assert (remote_copy.st_uid, stat.S_IMODE(remote_copy.st_mode)) == (usera.uid, 0o400)
    for where in (data, node_dir / "view"):
        assert can(userb, ["cat", str(where / WORLD_LFN.lstrip("/"))]), where
        assert not can(userb, ["cat", str(where / MINE_LFN.lstrip("/"))]), where
        assert not can(userb, ["cat", str(where / SECRET_LFN.lstrip("/"))]), where  # usera's node cannot either


# -- a real node: revalidation, restart, listings ----------------------------------------------------------


@pytest.fixture
def peer():
    standin = PeerStandIn(SECRET.encode()).start()
    yield standin
    standin.stop()


def perms_beneath(path: Path) -> dict[str, tuple[int, int, int]]:
    return {str(p.relative_to(path)): (p.lstat().st_uid, p.lstat().st_gid, p.lstat().st_mode)
            for p in [path, *path.rglob("*")]}


def test_node_follows_source_perms_and_never_loosens_them_on_restart(storage_root, shared_tmp, two_users,
                                                                     inprocess_node, peer):
    root, lfns = storage_root
    usera, userb = two_users
    dev = shared_tmp / "dev0"
    peer.assign([(lfn, 1.0) for lfn in lfns])
    section = {"cache": {"storage": "posix", "storage_location": str(root), "devices": [{"path": str(dev)}],
                         "coordinators": [peer.url], "locators": [peer.url], "cycle": 0.2, "retry_delay": 0.1,
                         "revalidate_interval": 0.0, "union": "symlink", "view": str(shared_tmp / "view")}}
    node = inprocess_node("p1", ["cache"], sections=section)
    client = Client(SECRET.encode())
    wait_until(lambda: client.get(f"{node.url}/api/v1/cache/files")["total"] == len(lfns), timeout=20,
               what="all files staged")
    copy = dev / "data" / OPEN_LFN.lstrip("/")
    assert can(usera, ["cat", str(copy)]) and can(usera, ["cat", str(shared_tmp / "view" / OPEN_LFN.lstrip("/"))])

    # userb makes a public file private: the copy follows within a revalidation
    assert can(userb, ["chmod", "600", str(root / OPEN_LFN.lstrip("/"))])
    assert can(userb, ["chmod", "700", str(root / "store/public")])
    wait_until(lambda: stat.S_IMODE(copy.stat().st_mode) == 0o400 and
               stat.S_IMODE(copy.parent.stat().st_mode) == 0o700, timeout=15, what="the copy following its source")
    assert not can(usera, ["cat", str(copy)]) and not can(usera, ["ls", str(copy.parent)])

    # restart over a copy an older HTDA left (root's, 0644, meta in user.*): the source's perms come back
    node.stop()
    before = perms_beneath(dev)
    secret = dev / "data" / SECRET_LFN.lstrip("/")
    meta = os.getxattr(secret, META_XATTR)
    os.removexattr(secret, META_XATTR)
    os.setxattr(secret, LEGACY_XATTR, meta)
    os.chown(secret, 0, 0)
    os.chmod(secret, 0o644)
    os.chown(secret.parent, 0, 0)
    os.chmod(secret.parent, 0o755)
    node = inprocess_node("p2", ["cache"], sections=section)
    assert node.components["cache"].recovered["kept"] == len(lfns)  # nothing fetched again
    assert perms_beneath(dev) == before
    assert os.getxattr(secret, META_XATTR) == meta and LEGACY_XATTR not in os.listxattr(secret)
    assert not can(usera, ["cat", str(secret)]) and not can(usera, ["ls", str(secret.parent)])
    assert not can(usera, ["cat", str(shared_tmp / "view" / SECRET_LFN.lstrip("/"))])


def test_listings_of_copies_need_a_signature_even_from_loopback(inprocess_node, peer, shared_tmp, anonymous):
    """Jobs on a worker share its loopback (in pool.read_networks by default): they must not list its copies."""
    section = {"cache": {"storage_location": str(shared_tmp / "storage"), "devices": [{"path": str(shared_tmp / "d")}],
                         "coordinators": [peer.url], "locators": [peer.url]}}
    node = inprocess_node("l1", ["cache"], sections=section)
    for route in ("files", "staging", "evictions"):
        with pytest.raises(HTTPStatusError) as err:
            anonymous.get(f"{node.url}/api/v1/cache/{route}")
        assert err.value.status == 401, route
        assert Client(SECRET.encode()).get(f"{node.url}/api/v1/cache/{route}") is not None
    assert anonymous.get(f"{node.url}/api/v1/cache/devices")["devices"]  # usage names no one's files

