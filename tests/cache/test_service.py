"""CacheService on its own, with a fake clock: retries, releases, deferred copies, eviction, revalidation, peers.

Real POSIX storage and devices under tmp_path, a real stager on the service's staging threads, the shared
coordinator stand-in for releases; time moves only when a test advances the clock, so nothing here sleeps
(``settle`` waits for the staging threads to finish their copies, not for time to pass).
"""

from __future__ import annotations

import os

import pytest

from htda.cache.backends.logical import LogicalDevice
from htda.cache.backends.posix import PosixDevice, PosixStorage
from htda.cache.component import SCHEMA
from htda.cache.reporting import HoldingsReporter
from htda.cache.service import Assignment, CacheService, Marks
from htda.cache.staging import Stager
from htda.cache.union.symlink import SymlinkDriver
from htda.cache.view import VIEW_RETRY
from htda.node.client import Client
from htda.node.config import validate
from htda.node.metrics import Registry
from htda.protocol.coordinator import AssignedFile
from testkit.clock import FakeClock
from testkit.fakes import PeerStandIn
from testkit.nodes import SECRET, wait_until
from testkit.storage import after_each_chunk, make_tree

KB = 1000


@pytest.fixture
def coordinator():
    standin = PeerStandIn(SECRET.encode()).start()
    yield standin
    standin.stop()


class Node:
    """A CacheService over one POSIX device and POSIX storage, on a fake clock."""

    def __init__(self, tmp_path, coordinator: PeerStandIn, files: dict[str, int], capacity: int = 0,
                 high: float = 0.95, low: float = 0.90, view: str | None = None, mtime_stable: bool = True,
                 **config):
        self.clock = FakeClock()
        self.root = tmp_path / "storage"
        self.files = make_tree(self.root, files)
        self.storage = PosixStorage(str(self.root), {"mtime_stable": mtime_stable})
        self.dev = PosixDevice(str(tmp_path / "dev"), {"capacity": capacity})
        self.coordinator = coordinator
        self.config = validate({"retry_delay": 10.0, "max_attempts": 3, "release_interval": 300.0, **config},
                               SCHEMA, "test")
        reporter = HoldingsReporter("w1", Client(SECRET.encode(), retries=0), lambda: [], lambda: [],
                                    clock=self.clock)
        device = LogicalDevice([self.dev])
        driver = view and SymlinkDriver(view, device.branches(), str(self.root), str(tmp_path / "data"), {})
        self.service = CacheService(device, {id(self.dev): Marks(high, low)}, self.storage_for,
                                    Stager(buffer_size=64 * KB, clock=self.clock), reporter, driver or None,
                                    self.config, Registry(), lambda names: [], clock=self.clock)

    def storage_for(self, source):
        if source:
            raise ValueError(f"unsupported source {source!r}")
        return self.storage

    def apply(self, *files: AssignedFile, draining: bool = False) -> dict[str, int]:
        """One cycle's assignment of ``files``; waits for the copies it started."""
        counts = self.service.apply(Assignment(list(files), draining, self.coordinator.url, 1))
        self.settle()
        return counts

    def twice(self, *files: AssignedFile) -> dict[str, int]:
        """Two cycles with the same assignment: a copy starts at the second (the first only confirms it)."""
        self.apply(*files)
        return self.apply(*files)

    def settle(self) -> None:
        wait_until(lambda: not self.service.jobs, interval=0.005, what="the copies in flight to end")

    def held(self) -> set[str]:
        return {e.lfn for e in self.service.index.entries()}

    def released(self, reason: str) -> list[str]:
        return [lfn for r in self.coordinator.releases if r["reason"] == reason for lfn in r["lfns"]]

    def path(self, lfn: str):
        return self.root / lfn.lstrip("/")


def wanted(lfn: str, score: float = 1.0, size: int | None = None, **extra) -> AssignedFile:
    return AssignedFile(lfn=lfn, score=float(score), size=size, source=None, **extra)


@pytest.fixture
def make_node(tmp_path, coordinator):
    made: list[Node] = []

    def make(files: dict[str, int], **kwargs) -> Node:
        made.append(Node(tmp_path, coordinator, files, **kwargs))
        return made[-1]

    yield make
    for node in made:
        node.service.shutdown()


def unsteady(node: Node, lfn: str) -> None:
    """Every copy of ``lfn`` from now on sees its source change under it: a transient failure."""
    path = node.path(lfn)

    def touch():
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    after_each_chunk(node.storage, touch)


def test_a_copy_starts_at_the_second_assignment_naming_it(make_node):
    node = make_node({"/a.dat": 100 * KB})
    assert node.apply(wanted("/a.dat"))["unconfirmed"] == 1 and node.held() == set()
    assert node.apply(wanted("/a.dat"))["stage"] == 1
    assert node.held() == {"/a.dat"}
    entry = node.service.index.get("/a.dat")
    assert entry.checked_at == node.clock.time() and entry.staged_at == node.clock.time()


def test_transient_failures_back_off_and_are_released_after_max_attempts(make_node):
    node = make_node({"/a.dat": 300 * KB})
    unsteady(node, "/a.dat")
    a = wanted("/a.dat")
    for attempt, delay in ((1, 10.0), (2, 20.0), (3, 40.0)):
        assert node.twice(a)["stage"] == 1
        failure = node.service.failures.get("/a.dat")
        assert (failure.count, failure.permanent) == (attempt, False)
        assert failure.retry_at == node.clock.time() + delay
        assert "source changed during the copy" in failure.error
        if attempt < 3:
            assert node.released("copies failed") == []
        node.clock.advance(delay - 1)
        assert node.twice(a)["wanted"] == 0  # not yet
        node.clock.advance(1)
    assert node.released("copies failed") == ["/a.dat"]  # at the first cycle after the third failure
    node.twice(a)
    assert node.released("copies failed") == ["/a.dat"]  # once per release_interval
    node.clock.advance(300)
    node.apply(a)
    assert node.released("copies failed") == ["/a.dat", "/a.dat"]
    assert node.held() == set() and node.service.exhausted() == ["/a.dat"]


def test_a_copy_that_lands_clears_its_failures(make_node):
    node = make_node({"/a.dat": 300 * KB})
    unsteady(node, "/a.dat")
    node.twice(wanted("/a.dat"))
    assert node.service.failures.get("/a.dat").count == 1
    node.storage = PosixStorage(str(node.root))  # the source is steady again
    node.clock.advance(10)
    node.twice(wanted("/a.dat"))
    assert node.held() == {"/a.dat"} and node.service.failures.get("/a.dat") is None


def test_a_missing_source_is_a_permanent_failure_released_at_once(make_node):
    node = make_node({"/a.dat": 1 * KB})
    counts = node.apply(wanted("/gone.dat"), wanted("/a.dat"))
    failure = node.service.failures.get("/gone.dat")
    assert failure.permanent and failure.retry_at == node.clock.time() + 10.0 * 64
    assert counts["wanted"] == 1 and node.released("copies failed") == ["/gone.dat"]
    node.clock.advance(10.0 * 64 - 1)
    assert node.apply(wanted("/gone.dat"))["wanted"] == 0
    node.apply(wanted("/a.dat"))
    assert node.service.failures.get("/gone.dat") is None  # no longer assigned: forgotten


def test_deferred_copies_wait_and_start_once_no_longer_deferred(make_node):
    node = make_node({"/a.dat": 100 * KB})
    for _ in range(3):
        counts = node.apply(wanted("/a.dat", defer=True))
        assert (counts["deferred"], counts["stage"]) == (1, 0)
    assert node.held() == set()
    assert node.apply(wanted("/a.dat"))["stage"] == 1  # confirmed by the deferred assignments before it
    assert node.held() == {"/a.dat"}


def test_eviction_takes_the_lowest_scores_first_and_down_to_the_low_mark(make_node):
    files = {f"/f{i}.dat": 200 * KB for i in range(5)}
    node = make_node(files, capacity=1_000 * KB, high=0.9, low=0.5)
    four = [wanted(f"/f{i}.dat", score=10 - i) for i in range(4)]
    node.twice(*four)
    assert node.held() == {"/f0.dat", "/f1.dat", "/f2.dat", "/f3.dat"}  # 800 kB under the high mark's 900
    better = wanted("/f4.dat", score=20)
    counts = node.apply(better, *four)  # room is made at once, the copy starts at the next assignment
    assert (counts["evict"], counts["unconfirmed"]) == (1, 1)
    assert node.apply(better, *four)["stage"] == 1
    assert node.held() == {"/f4.dat", "/f0.dat", "/f1.dat", "/f2.dat"}
    assert [(e["lfn"], e["reason"]) for e in node.service.evictions] == [("/f3.dat", "outranked")]
    node.dev.options["capacity"] = 800 * KB  # the operator shrinks the device: 800 kB held > 0.9 x 800
    node.apply(better, *four)
    assert node.held() == {"/f4.dat", "/f0.dat"}  # down to the low mark (400 kB) at once, worst first
    assert [e["lfn"] for e in node.service.evictions][1:] == ["/f2.dat", "/f1.dat"]  # score 8, then 9


def test_a_copy_no_longer_assigned_stays_spare_until_its_room_is_needed(make_node):
    files = {"/moved.dat": 400 * KB, "/kept.dat": 300 * KB, "/new.dat": 400 * KB}
    node = make_node(files, capacity=1_000 * KB, high=0.9, low=0.8)  # spare copies stay under 800 kB
    node.twice(wanted("/moved.dat", score=5), wanted("/kept.dat", score=4))
    counts = node.apply(wanted("/kept.dat", score=4))  # the coordinator moved /moved.dat to another node
    assert counts["spare"] == 1 and counts["evict"] == 0
    assert node.held() == {"/moved.dat", "/kept.dat"} and not node.service.evictions  # still served here
    node.twice(wanted("/kept.dat", score=4), wanted("/new.dat", score=3))  # 300 + 400 + 400 > 900 kB
    assert node.held() == {"/kept.dat", "/new.dat"}
    assert [(e["lfn"], e["reason"]) for e in node.service.evictions] == [("/moved.dat", "unassigned")]


def test_unassigned_copies_are_evicted_but_not_while_draining_for_room(make_node):
    node = make_node({"/a.dat": 1 * KB, "/b.dat": 1 * KB})
    node.twice(wanted("/a.dat"), wanted("/b.dat"))
    node.apply(wanted("/a.dat"), draining=True)
    assert node.held() == {"/a.dat"}
    assert [(e["lfn"], e["reason"]) for e in node.service.evictions] == [("/b.dat", "unassigned")]


def test_revalidation_waits_for_its_interval(make_node):
    node = make_node({"/a.dat": 10 * KB, "/b.dat": 10 * KB}, revalidate_interval=600.0)
    node.twice(wanted("/a.dat"), wanted("/b.dat"))
    for lfn in ("/a.dat", "/b.dat"):
        os.utime(node.path(lfn), (1e9, 1e9))  # both sources change
    node.clock.advance(599)
    assert node.service.revalidate_some() == 0 and len(node.held()) == 2
    node.clock.advance(1)
    assert node.service.revalidate_some() == 2 and node.held() == set()
    assert {e["reason"] for e in node.service.evictions} == {"source changed"}


def test_behind_a_caching_proxy_a_new_mtime_is_not_a_new_version_but_a_new_size_is(make_node):
    """A read-through proxy gives a file the time it cached it as mtime, and that time moves while a job's reads
    fill it (cache.storage_mtime_check = false): copies neither fail nor are dropped for it."""
    node = make_node({"/a.dat": 300 * KB, "/b.dat": 10 * KB}, revalidate_interval=600.0, mtime_stable=False)
    unsteady(node, "/a.dat")
    assert node.twice(wanted("/a.dat"), wanted("/b.dat"))["stage"] == 2
    assert node.held() == {"/a.dat", "/b.dat"} and node.service.failures.get("/a.dat") is None
    os.utime(node.path("/b.dat"), (1e9, 1e9))
    node.clock.advance(600)
    assert node.service.revalidate_some() == 0 and node.held() == {"/a.dat", "/b.dat"}
    node.path("/b.dat").write_bytes(b"x" * (11 * KB))  # a rewrite that changes the size still counts
    node.clock.advance(600)
    assert node.service.revalidate_some() == 1 and node.held() == {"/a.dat"}


def test_revalidation_rechecks_the_stalest_copies_a_few_per_cycle(make_node):
    node = make_node({f"/f{i}.dat": 1 * KB for i in range(3)}, revalidate_interval=60.0, revalidate_per_cycle=2)
    node.twice(*(wanted(f"/f{i}.dat") for i in range(3)))
    node.clock.advance(60)
    assert node.service.revalidate_some() == 0
    checked = sorted(e.checked_at for e in node.service.index.entries())
    assert checked == [node.clock.time() - 60, node.clock.time(), node.clock.time()]
    node.clock.advance(1)
    assert node.service.revalidate_some() == 0
    assert all(e.checked_at >= node.clock.time() - 1 for e in node.service.index.entries())


def test_a_peers_only_copy_waits_for_a_peer_without_using_up_its_attempts(make_node):
    node = make_node({"/a.dat": 1 * KB})
    only = wanted("/a.dat", peers=["w2"], peers_only=True)
    for _ in range(5):
        node.twice(only)
        failure = node.service.failures.get("/a.dat")
        assert failure.count == 0 and not failure.permanent and "no peer" in failure.error
        assert failure.retry_at == node.clock.time() + 10.0
        node.clock.advance(10)
    assert node.service.exhausted() == [] and node.released("copies failed") == []
    assert node.held() == set()  # and storage was never read for it
    node.twice(wanted("/a.dat", peers=["w2"]))  # storage allowed again
    assert node.held() == {"/a.dat"}


def test_an_admin_eviction_keeps_the_file_away_for_the_release_interval(make_node):
    node = make_node({"/a.dat": 1 * KB}, release_interval=100.0)
    node.twice(wanted("/a.dat"))
    assert node.service.evict_on_request(["/a.dat"], node.coordinator.url) == ["/a.dat"]
    assert node.released("evicted by an admin") == ["/a.dat"]
    node.clock.advance(99)
    assert node.twice(wanted("/a.dat"))["wanted"] == 0 and node.held() == set()
    node.clock.advance(1)
    node.twice(wanted("/a.dat"))
    assert node.held() == {"/a.dat"}


def test_no_room_releases_the_file_once_per_interval(make_node):
    node = make_node({"/big.dat": 500 * KB}, capacity=100 * KB, release_interval=50.0)
    node.apply(wanted("/big.dat"))
    node.apply(wanted("/big.dat"))
    assert node.released("no room") == ["/big.dat"]
    node.clock.advance(50)
    node.apply(wanted("/big.dat"))
    assert node.released("no room") == ["/big.dat", "/big.dat"] and node.held() == set()


def test_a_view_that_failed_to_start_is_tried_again_after_view_retry(make_node, tmp_path):
    (tmp_path / "blocked").write_text("a file where the view's parent directory should be")
    node = make_node({"/a.dat": 1 * KB}, view=str(tmp_path / "blocked/view"))
    node.service.recover()
    assert node.service.view_error
    node.twice(wanted("/a.dat"))  # copies go on without the view
    assert node.held() == {"/a.dat"}
    (tmp_path / "blocked").unlink()
    node.clock.advance(VIEW_RETRY - 1)
    node.service.refresh_view()
    assert node.service.view_error
    node.clock.advance(1)
    node.service.refresh_view()
    assert node.service.view_error == ""
    assert os.readlink(tmp_path / "blocked/view/a.dat") == str(node.dev.path) + "/data/a.dat"
