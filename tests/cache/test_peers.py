"""Copies from peers: a cache node copies a file from another node's copy, over the workers' links.

Real nodes on loopback (cheroot), real PycURL, real POSIX storage and devices.  Storage is wrapped to count
what it gives, so a test sees that a copy from a peer read no storage bytes.
"""

from __future__ import annotations

import os
import urllib.request
import zlib
from pathlib import Path

import pytest

from htda.cache.backends.posix import PosixDevice, PosixStorage
from htda.cache.peers import MAX_RANGE, PeerSource, copy_url
from htda.cache.service import MAX_PEERS, _peers_of
from htda.cache.staging import PeersUnavailable, Stager, StagingError, StagingJob
from htda.node.client import BadResponse, Client
from htda.protocol.base import ProtocolError, check_answer, to_wire
from htda.protocol.coordinator import AssignedFile
from testkit.fakes import PeerStandIn
from testkit.http import raw as raw_request
from testkit.nodes import SECRET, wait_until
from testkit.storage import after_each_chunk, make_tree

CHUNK = 64 * 1024
SIZES = {"/store/p/big.dat": 5 * CHUNK + 1234, "/store/p/small.dat": 3_000, "/store/p/empty.dat": 0,
         "/store/p/odd name+%.dat": 700}
BIG = "/store/p/big.dat"


class CountingStorage(PosixStorage):
    """POSIX storage that records every byte it gives: ``reads`` is [(offset, bytes)] per read or copy."""

    supports_ranges = True

    def __init__(self, location: str, options=None):
        super().__init__(location, options)
        self.reads: list[tuple[int, int]] = []

    def read(self, lfn, sink, offset=0, buffer_size=8 << 20):
        n = super().read(lfn, sink, offset, buffer_size)
        self.reads.append((offset, n))
        return n

    def copy_to_fd(self, lfn, out_fd, copied, offset=0, chunk=8 << 20):
        n = super().copy_to_fd(lfn, out_fd, copied, offset, chunk)
        if n is not None:
            self.reads.append((offset, n))
        return n


class NoRangeStorage(CountingStorage):
    """Storage that can only give a file from its start (as xrdcp)."""

    supports_ranges = False


def watch_storage(storage: PosixStorage) -> list[tuple[int, int]]:
    """Count what a live node's storage gives from now on (its instance's read and copy_to_fd)."""
    reads: list[tuple[int, int]] = []
    read, copy = storage.read, storage.copy_to_fd

    def counted_read(lfn, sink, offset=0, buffer_size=8 << 20):
        n = read(lfn, sink, offset, buffer_size)
        reads.append((offset, n))
        return n

    def counted_copy(lfn, out_fd, copied, offset=0, chunk=8 << 20):
        n = copy(lfn, out_fd, copied, offset, chunk)
        if n is not None:
            reads.append((offset, n))
        return n

    storage.read, storage.copy_to_fd = counted_read, counted_copy
    return reads


@pytest.fixture
def standins():
    made: list[PeerStandIn] = []

    def make() -> PeerStandIn:
        made.append(PeerStandIn(SECRET.encode()).start())
        return made[-1]

    yield make
    for standin in made:
        standin.stop()


@pytest.fixture
def storage(tmp_path):
    root = tmp_path / "storage"
    return root, make_tree(root, SIZES)


def section(tmp_path: Path, standin: PeerStandIn, root: Path, dev: str, **extra) -> dict:
    cache = {"storage": "posix", "storage_location": str(root), "devices": [{"path": str(tmp_path / dev)}],
             "coordinators": [standin.url], "locators": [standin.url], "cycle": 0.2, "holdings_interval": 1.0,
             "retry_delay": 0.1, "revalidate_interval": 3600.0, "buffer_size": CHUNK, "report_reads": False}
    cache.update(extra)
    return {"cache": cache}


@pytest.fixture
def holder(inprocess_node, standins, storage, tmp_path):
    """Node ``a``, a cache holding every file of ``storage``."""
    root, files = storage
    coordinator = standins()
    coordinator.assign([(lfn, 1.0) for lfn in files])
    node = inprocess_node("a", ["cache"], sections=section(tmp_path, coordinator, root, "dev-a"))
    index = node.components["cache"].service.index
    wait_until(lambda: all(lfn in index for lfn in files), what="node a holding every file")
    node.files = files
    return node


def metric(node, name: str) -> float:
    text = urllib.request.urlopen(f"{node.url}/metrics", timeout=5).read().decode()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")
              or line.startswith(name + "{")]
    return sum(values)


def copier(tmp_path, holder, storage_cls=CountingStorage, fallback=True, chunk=CHUNK, check_mtime=True):
    """A stager, device and counting storage of a second node, and a job factory copying from ``holder``."""
    device = PosixDevice(str(tmp_path / "dev-b"))
    store = storage_cls(str(tmp_path / "storage"))
    client = Client(SECRET.encode(), retries=0)

    def job(lfn: str) -> StagingJob:
        return StagingJob(lfn, store, device, peers=[PeerSource("a", holder.url, client, chunk=chunk, timeout=5,
                                                                check_mtime=check_mtime)],
                          storage_fallback=fallback)

    return Stager(buffer_size=chunk), device, store, job


def assert_nothing_left(device: PosixDevice) -> None:
    assert os.listdir(device.staging_dir) == [] and list(device.scan()) == []


# -- the route -----------------------------------------------------------------------------------------------
def test_route_serves_ranges_with_size_and_checksum(holder, signed):
    data = holder.files[BIG]
    entry = holder.components["cache"].service.index.get(BIG)
    before = metric(holder, "htda_cache_peer_served_bytes_total")
    status, headers, body = signed.fetch(copy_url(holder.url, BIG), ["Range: bytes=100-199"])
    assert status == 206 and body == data[100:200]
    assert headers["content-range"] == f"bytes 100-199/{len(data)}"
    assert headers["x-htda-size"] == str(len(data)) and float(headers["x-htda-mtime"]) == entry.mtime
    assert headers["x-htda-checksum-kind"] == "adler32" and headers["x-htda-checksum"] == entry.checksum
    status, headers, body = signed.fetch(copy_url(holder.url, BIG), [f"Range: bytes={len(data) - 10}-"])
    assert status == 206 and body == data[-10:]
    status, _, body = signed.fetch(copy_url(holder.url, "/store/p/small.dat"))  # small: whole without a Range
    assert status == 200 and body == holder.files["/store/p/small.dat"]
    assert metric(holder, "htda_cache_peer_served_bytes_total") == before + 100 + 10 + 3_000
    for bad in ("bytes=99999999-", "bytes=5-2", "bytes=0-1,5-6", "items=0-1", "bytes=-"):
        status, _, _ = signed.fetch(copy_url(holder.url, BIG), [f"Range: {bad}"])
        assert status == 416, bad
    status, _, _ = signed.fetch(copy_url(holder.url, "/store/p/not-held.dat"), ["Range: bytes=0-9"])
    assert status == 404


def test_route_cuts_a_range_to_its_limit(holder, signed):
    status, headers, body = signed.fetch(copy_url(holder.url, BIG), [f"Range: bytes=0-{10 * MAX_RANGE}"])
    size = len(holder.files[BIG])
    assert status == 206 and len(body) == min(size, MAX_RANGE) and headers["content-range"].endswith(f"/{size}")


def test_unsigned_requests_are_refused_before_anything_is_read(holder, anonymous):
    before = metric(holder, "htda_cache_peer_served_bytes_total")
    status, body = raw_request("GET", copy_url(holder.url, BIG), headers=["Range: bytes=0-99"])
    assert status == 401 and b"authentication failed" in body
    assert holder.files[BIG][:16] not in body
    # a forged signature is no better
    status, body = raw_request("GET", copy_url(holder.url, BIG),
                                 headers=["Range: bytes=0-99", "Authorization: HTDA-HMAC ts=1,nonce=00,sig=00"])
    assert status == 401
    assert metric(holder, "htda_cache_peer_served_bytes_total") == before


def test_hostile_lfns_are_refused(holder, signed, tmp_path):
    base = f"{holder.url}/api/v1/cache/copies"
    for path in ("/../../etc/shadow", "/store/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "//etc/passwd",
                 "/store/p/big.dat%00x"):
        status, _, body = signed.fetch(base + path, ["Range: bytes=0-99"])
        # 400 (not an LFN), 404, or 401 where the server reads the escaped target otherwise than it was signed
        assert status in ((400, 401, 404) if "%" in path else (400, 404)), (path, status)
        assert b"root:" not in body
    # a copy held, swapped for a link to a file outside the device: not followed
    data_dir = tmp_path / "dev-a" / "data"
    copy = data_dir / "store/p/small.dat"
    copy.unlink()
    copy.symlink_to("/etc/passwd")
    status, _, body = signed.fetch(copy_url(holder.url, "/store/p/small.dat"), ["Range: bytes=0-99"])
    assert status == 404 and b"root:" not in body


# -- the stager copying from a peer ----------------------------------------------------------------------------
def test_copy_from_a_peer_reads_no_storage_bytes(holder, tmp_path):
    stager, device, store, job = copier(tmp_path, holder, fallback=False)
    for lfn, data in holder.files.items():
        j = job(lfn)
        meta = stager.stage(j)
        assert (tmp_path / "dev-b/data" / lfn.lstrip("/")).read_bytes() == data
        assert meta["checksum"] == holder.components["cache"].service.index.get(lfn).checksum
        assert j.source_bytes.get("storage", 0) == 0 and j.peer_bytes == len(data)
    assert store.reads == []  # storage stat'ed every file, gave no byte


@pytest.mark.parametrize("how", ["stopped", "dropped"])
def test_peer_gone_mid_copy_storage_resumes_where_it_stopped(holder, tmp_path, how):
    stager, device, store, job = copier(tmp_path, holder)
    gone = []

    j = job(BIG)

    def after_a_chunk():
        if not gone:
            gone.append(j.done_bytes)
            if how == "stopped":
                holder.server.stop()  # the peer dies
            else:
                holder.components["cache"].service.index.remove(BIG)  # the peer evicted it: 404 from now on

    after_each_chunk(j.peers[0], after_a_chunk)
    stager.stage(j)
    assert (tmp_path / "dev-b/data" / BIG.lstrip("/")).read_bytes() == holder.files[BIG]
    assert gone == [CHUNK]
    assert store.reads == [(CHUNK, len(holder.files[BIG]) - CHUNK)]  # resumed at the peer's last byte
    assert j.source_bytes == {"peer:a": CHUNK, "storage": len(holder.files[BIG]) - CHUNK}


def test_storage_that_cannot_resume_starts_again_cleanly(holder, tmp_path):
    stager, device, store, job = copier(tmp_path, holder, storage_cls=NoRangeStorage)
    j = job(BIG)
    after_each_chunk(j.peers[0], lambda: holder.components["cache"].service.index.remove(BIG))
    meta = stager.stage(j)
    data = holder.files[BIG]
    assert (tmp_path / "dev-b/data" / BIG.lstrip("/")).read_bytes() == data
    assert store.reads == [(0, len(data))] and j.source_bytes == {"storage": len(data)}
    assert meta["checksum"] == f"{zlib.adler32(data):08x}"


def test_peers_only_fails_transiently_and_reads_no_storage(holder, tmp_path):
    stager, device, store, job = copier(tmp_path, holder, fallback=False)
    j = job(BIG)
    after_each_chunk(j.peers[0], holder.server.stop)
    with pytest.raises(PeersUnavailable) as err:
        stager.stage(j)
    assert not err.value.permanent
    assert store.reads == []
    assert_nothing_left(device)


def test_corrupt_copy_at_the_peer_is_refused(holder, tmp_path):
    copy = tmp_path / "dev-a/data" / BIG.lstrip("/")
    st = copy.stat()
    with open(copy, "r+b") as fh:  # bit rot at the peer: same size and mtime, other bytes
        fh.seek(CHUNK + 10)
        fh.write(b"\x00\xff" * 8)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    stager, device, store, job = copier(tmp_path, holder, fallback=False)
    with pytest.raises(StagingError, match="peer a recorded") as err:
        stager.stage(job(BIG))
    assert not err.value.permanent and not isinstance(err.value, PeersUnavailable)  # a fault: it counts
    assert store.reads == []
    assert_nothing_left(device)
    # where storage may be read, the peer's bytes are thrown away and the whole file comes from storage
    stager, device, store, job = copier(tmp_path, holder, fallback=True)
    j = job(BIG)
    stager.stage(j)
    assert (tmp_path / "dev-b/data" / BIG.lstrip("/")).read_bytes() == holder.files[BIG]
    assert store.reads == [(0, len(holder.files[BIG]))] and j.source_bytes == {"storage": len(holder.files[BIG])}


def test_copy_of_an_older_version_at_the_peer_is_refused(holder, tmp_path):
    source = tmp_path / "storage" / BIG.lstrip("/")
    data = os.urandom(len(holder.files[BIG]))  # the source rewritten: same size, new bytes and mtime
    source.write_bytes(data)
    os.utime(source, (1_700_000_000, 1_700_000_000))
    stager, device, store, job = copier(tmp_path, holder, fallback=False)
    with pytest.raises(PeersUnavailable, match="not of the source's version"):
        stager.stage(job(BIG))
    assert store.reads == [] and os.listdir(device.staging_dir) == []
    stager, device, store, job = copier(tmp_path, holder, fallback=True)
    stager.stage(job(BIG))
    assert (tmp_path / "dev-b/data" / BIG.lstrip("/")).read_bytes() == data
    assert store.reads == [(0, len(data))]


def test_without_the_mtime_check_only_the_size_must_agree(holder, tmp_path):
    """Workers behind proxies of their own see different mtimes of one file: the size still decides."""
    source = tmp_path / "storage" / BIG.lstrip("/")
    os.utime(source, (1_700_000_000, 1_700_000_000))  # the same bytes, another mtime (another proxy's view)
    stager, device, store, job = copier(tmp_path, holder, fallback=False, check_mtime=False)
    stager.stage(job(BIG))
    assert (tmp_path / "dev-b/data" / BIG.lstrip("/")).read_bytes() == holder.files[BIG] and store.reads == []
    source.write_bytes(holder.files[BIG] + b"x")  # a new version of another size is refused all the same
    stager, device, store, job = copier(tmp_path, holder, fallback=False, check_mtime=False)
    with pytest.raises(PeersUnavailable, match="not of the source's version"):
        stager.stage(job(BIG))


# -- two nodes of a pool -----------------------------------------------------------------------------------------
def test_node_copies_an_assigned_file_from_its_peer(holder, inprocess_node, standins, tmp_path):
    coordinator = standins()
    node = inprocess_node("b", ["cache"], seeds=[holder.url],
                          sections=section(tmp_path, coordinator, tmp_path / "storage", "dev-b"))
    cache = node.components["cache"]
    wait_until(lambda: {m.name for m in node.members("cache")} == {"a", "b"}, what="b seeing a in the pool")
    reads = watch_storage(cache.default_storage)
    coordinator.assign([{"lfn": lfn, "score": 1.0, "size": None, "source": None, "peers": ["b", "a"],
                         "peers_only": True} for lfn in holder.files]
                       + [{"lfn": "/store/p/nowhere.dat", "score": 2.0, "size": 10, "source": None,
                           "peers": ["nobody"], "peers_only": True}])
    index = cache.service.index
    wait_until(lambda: all(lfn in index for lfn in holder.files), what="b holding every file")
    for lfn, data in holder.files.items():
        assert (tmp_path / "dev-b/data" / lfn.lstrip("/")).read_bytes() == data
    assert reads == []
    copied = sum(len(d) for d in holder.files.values())
    assert metric(node, "htda_cache_peer_copied_bytes_total") == copied
    assert metric(holder, "htda_cache_peer_served_bytes_total") >= copied
    # no peer in the pool for a peers-only file: it waits, transiently, and never counts towards a release
    failure = wait_until(lambda: cache.service.failures.get("/store/p/nowhere.dat"), what="the waiting file")
    assert not failure.permanent and failure.count == 0 and "no peer" in failure.error
    assert not any("/store/p/nowhere.dat" in r["lfns"] for r in coordinator.releases)


def test_fetch_ends_an_answer_over_its_limit(holder, signed):
    with pytest.raises(BadResponse, match="longer than 1000 bytes"):
        signed.fetch(copy_url(holder.url, BIG), ["Range: bytes=0-4999"], max_bytes=1000)
    status, _, body = signed.fetch(copy_url(holder.url, BIG), ["Range: bytes=0-999"], max_bytes=1000)
    assert status == 206 and body == holder.files[BIG][:1000]  # the handle is good again


def test_assignment_entries_without_or_with_bad_peers():
    def entry(**peers) -> AssignedFile:
        return AssignedFile(lfn="/a", score=1.0, size=None, source=None, **peers)

    assert _peers_of(entry()) == ()
    assert _peers_of(entry(peers=["a", "", "x" * 300, "b", "a"])) == ("a", "b")
    assert len(_peers_of(entry(peers=[f"n{i}" for i in range(50)]))) == MAX_PEERS
    for peers in ("node-a", ["a", 1, None]):  # not names: the client refuses the answer before the cache sees it
        with pytest.raises(ProtocolError, match="peers"):
            check_answer({**to_wire(entry()), "peers": peers}, AssignedFile)
