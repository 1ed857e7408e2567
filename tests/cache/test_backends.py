"""Storage backends against real sources: POSIX, a real xrootd server, a real HTTP server."""

from __future__ import annotations

import os
import time
import zlib

import pytest

from htda.cache.backends.base import FileStat, StorageError
from htda.cache.backends.http import HTTPStorage
from htda.cache.backends.logical import LogicalDevice
from htda.cache.backends.posix import PosixDevice, PosixStorage
from htda.cache.backends.xrootd import XRootDStorage
from testkit.storage import copy_tree, make_tree


def read_all(storage, lfn: str, offset: int = 0) -> bytes:
    chunks: list[bytes] = []
    storage.read(lfn, lambda c: chunks.append(bytes(c)), offset=offset, buffer_size=32 * 1024)
    return b"".join(chunks)


#: how far a backend's mtime may be from the file's own: HTTP's Last-Modified and xrdfs give whole seconds
MTIME_RESOLUTION = {"posix": 0.0, "http": 1.0, "xrootd": 1.0}


def check_backend(storage, files: dict[str, bytes], source_root) -> None:
    for lfn, data in files.items():
        st = storage.stat(lfn)
        assert st.size == len(data)
        slack = MTIME_RESOLUTION[storage.name] + 1e-6
        assert abs(st.mtime - os.stat(source_root / lfn.lstrip("/")).st_mtime) <= slack
        assert read_all(storage, lfn) == data
    with pytest.raises(FileNotFoundError):
        storage.stat("/store/nope.dat")


def test_posix_storage_reads_and_stats(source_tree):
    root, files = source_tree
    storage = PosixStorage(str(root))
    check_backend(storage, files, root)
    assert read_all(storage, "/store/a/one.dat", offset=1000) == files["/store/a/one.dat"][1000:]


def test_xrootd_storage_against_real_server(xrootd_server, source_tree):
    root, files = source_tree
    copy_tree(root, xrootd_server.root)
    storage = XRootDStorage(xrootd_server.url + "/", {"timeout": 5})
    check_backend(storage, files, xrootd_server.root)
    data = files["/store/a/two.dat"]
    assert storage.checksum("/store/a/two.dat", "adler32") == f"{zlib.adler32(data):08x}"
    with pytest.raises(FileNotFoundError):
        read_all(storage, "/store/missing.dat")


def test_xrootd_reads_from_an_offset(xrootd_server, source_tree):
    """Resuming: the rest of the file from any offset, nothing at its end, a clear error past it."""
    root, files = source_tree
    copy_tree(root, xrootd_server.root)
    storage = XRootDStorage(xrootd_server.url + "/", {"timeout": 5})
    data = files["/store/a/two.dat"]
    assert storage.supports_ranges
    for offset in (1, 12345, len(data) - 1):
        assert read_all(storage, "/store/a/two.dat", offset=offset) == data[offset:]
    assert read_all(storage, "/store/a/two.dat", offset=len(data)) == b""
    with pytest.raises(StorageError, match="shorter") as err:
        read_all(storage, "/store/a/two.dat", offset=len(data) + 1)
    assert not err.value.transient
    with pytest.raises(FileNotFoundError):
        read_all(storage, "/store/missing.dat", offset=10)


def test_xrootd_dead_server_fails_fast(shared_tmp):
    storage = XRootDStorage("root://127.0.0.1:9//", {"timeout": 1})
    with pytest.raises(StorageError):
        storage.stat("/store/a.dat")


def test_http_storage_ranges_and_errors(http_server, source_tree):
    root, files = source_tree
    copy_tree(root, http_server.root)
    storage = HTTPStorage(http_server.url, {"timeout": 5})
    check_backend(storage, files, http_server.root)
    assert read_all(storage, "/store/a/two.dat", offset=12345) == files["/store/a/two.dat"][12345:]


def test_http_storage_cut_connection_is_an_error(http_server, source_tree):
    root, files = source_tree
    copy_tree(root, http_server.root)
    http_server.cut_once_at(70_000)
    with pytest.raises(StorageError):
        read_all(HTTPStorage(http_server.url), "/store/a/two.dat")


def test_unreachable_http_is_a_storage_error():
    with pytest.raises(StorageError):
        HTTPStorage("http://127.0.0.1:9", {"connect_timeout": 1}).stat("/x")


def test_bad_locations_are_refused():
    with pytest.raises(ValueError):
        XRootDStorage("http://host/")
    with pytest.raises(ValueError):
        HTTPStorage("/some/dir")


def test_posix_device_commit_is_atomic_and_carries_meta(tmp_path):
    dev = PosixDevice(str(tmp_path / "dev"))
    tmp = dev.temporary(5)
    os.write(tmp.fd, b"hello")
    assert list(dev.scan()) == []  # not visible before commit
    tmp.commit("/store/x/h.txt", 1_600_000_000.5, {"lfn": "/store/x/h.txt", "size": 5})
    assert (tmp_path / "dev/data/store/x/h.txt").read_bytes() == b"hello"
    assert dev.stat("/store/x/h.txt") == FileStat(5, 1_600_000_000.5)
    [found] = list(dev.scan())
    assert found.meta == {"lfn": "/store/x/h.txt", "size": 5}
    assert os.listdir(dev.staging_dir) == []
    dev.delete("/store/x/h.txt")
    assert list(dev.scan()) == []


def test_discarded_temporary_leaves_nothing(tmp_path):
    dev = PosixDevice(str(tmp_path / "dev"))
    tmp = dev.temporary(100)
    tmp.discard()
    tmp.discard()
    assert os.listdir(dev.staging_dir) == [] and list(dev.scan()) == []
    dev.temporary(10)  # a crash leaves one behind
    assert dev.clean_temporaries() == 1


def test_logical_device_fills_by_free_space(tmpfs):
    small, big = tmpfs(1 << 20), tmpfs(4 << 20)
    devs = [PosixDevice(str(small)), PosixDevice(str(big))]
    logical = LogicalDevice(devs)
    assert logical.capacity_bytes() == devs[0].capacity_bytes() + devs[1].capacity_bytes()
    assert logical.choose(100) is devs[1]
    assert logical.choose(8 << 20) is None
    tmp = logical.temporary(1000)
    assert tmp.path.startswith(str(big))
    tmp.commit("/a/b.dat", 1.0, {"lfn": "/a/b.dat"})
    assert logical.holder("/a/b.dat") is devs[1]
    assert [h.lfn for h in logical.scan()] == ["/a/b.dat"]
    assert logical.branches() == [devs[0].data_dir, devs[1].data_dir]


@pytest.mark.slow
def test_http_stalled_transfer_times_out(http_server):
    make_tree(http_server.root, {"/store/stall.dat": 400_000})
    http_server.delay = 60.0  # a 64 KiB chunk, then silence
    started = time.monotonic()
    with pytest.raises(StorageError):  # curl averages speed over ~5 s, then the 1 s low-speed limit hits
        read_all(HTTPStorage(http_server.url, {"low_speed_time": 1}), "/store/stall.dat")
    assert time.monotonic() - started < 20


def test_https_storage_with_a_private_ca(tmp_path, source_tree):
    from testkit.certs import make_ca, make_cert
    from testkit.storage import RangeHTTPServer

    root, files = source_tree
    (tmp_path / "pki").mkdir()
    ca = make_ca(tmp_path / "pki")
    cert, key = make_cert(tmp_path / "pki", "storage", ca)
    server = RangeHTTPServer(root)
    server.use_tls(str(cert), str(key))
    server.start()
    try:
        storage = HTTPStorage(server.url, {"ca_file": str(tmp_path / "pki/ca.pem")})
        check_backend(storage, files, root)
        with pytest.raises(StorageError):  # a server whose certificate the CA did not sign is refused
            HTTPStorage(server.url).stat("/store/a/one.dat")
    finally:
        server.stop()
