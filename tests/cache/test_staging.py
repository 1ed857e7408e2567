"""Validated staging: good copies land, every fault leaves nothing visible and nothing reported."""

from __future__ import annotations

import os
import zlib

import pytest

from htda.cache.backends.http import HTTPStorage
from htda.cache.backends.posix import PosixDevice, PosixStorage
from htda.cache.backends.xrootd import XRootDStorage
from htda.cache.staging import Stager, StagingCancelled, StagingError, StagingJob
from testkit.processes import kill_where
from testkit.storage import after_each_chunk, copy_tree, make_tree


def stage(stager, storage, device, lfn):
    return stager.stage(StagingJob(lfn, storage, device))


def assert_nothing_left(device: PosixDevice) -> None:
    assert os.listdir(device.staging_dir) == [], "a temporary file was left behind"
    assert list(device.scan()) == [], "a copy became visible"


@pytest.mark.parametrize("kind", ["adler32", "crc32", "none"])
def test_posix_staging_copies_and_records_meta(source_tree, tmp_path, kind):
    root, files = source_tree
    storage, device = PosixStorage(str(root)), PosixDevice(str(tmp_path / "dev"))
    stager = Stager(checksum=kind, buffer_size=64 * 1024)
    for lfn, data in files.items():
        meta = stage(stager, storage, device, lfn)
        copy = tmp_path / "dev/data" / lfn.lstrip("/")
        assert copy.read_bytes() == data
        assert abs(copy.stat().st_mtime_ns - (root / lfn.lstrip("/")).stat().st_mtime_ns) < 1000
        expected = {"adler32": f"{zlib.adler32(data):08x}", "crc32": f"{zlib.crc32(data):08x}", "none": ""}[kind]
        assert meta["checksum"] == expected and meta["size"] == len(data)
    assert {h.lfn for h in device.scan()} == set(files)
    assert os.listdir(device.staging_dir) == []


def test_staging_from_xrootd_and_http(xrootd_server, http_server, source_tree, tmp_path):
    root, files = source_tree
    copy_tree(root, xrootd_server.root)
    copy_tree(root, http_server.root)
    for name, storage in [("x", XRootDStorage(xrootd_server.url + "/", {"timeout": 5})),
                          ("h", HTTPStorage(http_server.url))]:
        device = PosixDevice(str(tmp_path / name))
        for lfn, data in files.items():
            stage(Stager(buffer_size=64 * 1024), storage, device, lfn)
            assert (tmp_path / name / "data" / lfn.lstrip("/")).read_bytes() == data


def test_http_copy_resumes_after_a_cut(http_server, tmp_path):
    files = make_tree(http_server.root, {"/store/big.dat": 600_000})
    http_server.cut_once_at(200_000)
    device = PosixDevice(str(tmp_path / "dev"))
    stage(Stager(buffer_size=64 * 1024), HTTPStorage(http_server.url), device, "/store/big.dat")
    assert (tmp_path / "dev/data/store/big.dat").read_bytes() == files["/store/big.dat"]


def kill_children(name: str) -> int:
    """SIGKILL this process's children called ``name`` (a transfer tool); how many were killed."""
    return kill_where(lambda proc: proc.ppid == os.getpid() and proc.comm == name)


def test_xrootd_copy_resumes_after_the_transfer_dies(xrootd_server, tmp_path):
    """An ``xrdcp`` killed mid-copy: the copy goes on from the byte it reached (not from zero) and is whole."""
    files = make_tree(xrootd_server.root, {"/store/big.dat": 6 << 20})
    storage = XRootDStorage(xrootd_server.url + "/", {"timeout": 5})
    offsets: list[int] = []
    read = storage.read

    def recording_read(lfn, sink, offset=0, buffer_size=8 << 20):
        offsets.append(offset)
        return read(lfn, sink, offset=offset, buffer_size=buffer_size)

    storage.read = recording_read  # type: ignore[method-assign]
    job = StagingJob("/store/big.dat", storage, PosixDevice(str(tmp_path / "dev")))
    kills: list[int] = []
    after_each_chunk(storage, lambda: kills or (job.done_bytes >= 1 << 20 and kills.append(kill_children("xrdcp"))))
    Stager(buffer_size=64 * 1024, kernel_copy=False).stage(job)
    assert kills == [1]
    assert len(offsets) == 2 and offsets[0] == 0 and 1 << 20 <= offsets[1] < 6 << 20
    assert (tmp_path / "dev/data/store/big.dat").read_bytes() == files["/store/big.dat"]


def stage_with_fault(tmp_path, fault, size: int = 500_000, match: str | None = None):
    """Stage /f.dat while ``fault(job, path)`` runs after every chunk; the copy must fail and leave nothing."""
    make_tree(tmp_path / "s", {"/f.dat": size})
    device = PosixDevice(str(tmp_path / "dev"))
    job = StagingJob("/f.dat", PosixStorage(str(tmp_path / "s")), device)
    after_each_chunk(job.storage, lambda: fault(job, tmp_path / "s/f.dat"))
    with pytest.raises(StagingError, match=match):
        Stager(buffer_size=64 * 1024).stage(job)
    assert_nothing_left(device)


def test_source_vanishing_mid_copy(tmp_path):
    stage_with_fault(tmp_path, lambda job, path: job.done_bytes >= 100_000 and path.unlink(missing_ok=True),
                     match="vanished")


def test_source_changing_mid_copy(tmp_path):
    def rewrite(job, path):
        if job.done_bytes == 128 * 1024:
            with open(path, "r+b") as fh:  # same size, new bytes and mtime: only mtime/checksum can tell
                fh.seek(400_000)
                fh.write(b"X" * 1000)
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))

    stage_with_fault(tmp_path, rewrite, match="changed")


def test_source_growing_mid_copy(tmp_path):
    def grow(job, path):
        if job.done_bytes == 64 * 1024:
            with open(path, "ab") as fh:
                fh.write(b"more" * 100_000)

    stage_with_fault(tmp_path, grow, size=300_000)


def test_source_shrinking_mid_copy(tmp_path):
    stage_with_fault(tmp_path, lambda job, path: job.done_bytes == 64 * 1024 and os.truncate(path, 100_000))


def test_full_device_fails_cleanly(tmpfs, tmp_path):
    make_tree(tmp_path / "s", {"/big.dat": 3 << 20})
    device = PosixDevice(str(tmpfs(2 << 20)))
    with pytest.raises(StagingError, match="reserve|full") as err:
        stage(Stager(), PosixStorage(str(tmp_path / "s")), device, "/big.dat")
    assert err.value.permanent
    assert_nothing_left(device)


def test_device_filling_during_copy_fails_cleanly(tmpfs, tmp_path):
    make_tree(tmp_path / "s", {"/f.dat": 1 << 20})
    mount = tmpfs(2 << 20)
    device = PosixDevice(str(mount))
    hog = mount / "hog"
    job = StagingJob("/f.dat", PosixStorage(str(tmp_path / "s")), device)

    def fill():  # someone else fills the disk under a running copy (its space was reserved)
        if job.done_bytes == 64 * 1024 and not hog.exists():
            with open(hog, "wb") as fh:
                try:
                    fh.write(b"\0" * (4 << 20))
                except OSError:
                    pass

    after_each_chunk(job.storage, fill)
    Stager(buffer_size=64 * 1024).stage(job)  # reserved space: the copy still fits
    assert (mount / "data/f.dat").read_bytes() == (tmp_path / "s/f.dat").read_bytes()


def test_broken_root_file_is_refused(tmp_path, source_tree):
    root, files = source_tree
    data = files["/store/r/events.root"]
    bad = tmp_path / "s/store/bad.root"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(data[:200] + b"\0" * (len(data) - 200))
    device = PosixDevice(str(tmp_path / "dev"))
    with pytest.raises(StagingError, match="ROOT"):
        stage(Stager(), PosixStorage(str(tmp_path / "s")), device, "/store/bad.root")
    assert_nothing_left(device)
    stage(Stager(verify_root=False), PosixStorage(str(tmp_path / "s")), device, "/store/bad.root")


def test_missing_source_is_permanent(tmp_path):
    (tmp_path / "s").mkdir()
    device = PosixDevice(str(tmp_path / "dev"))
    with pytest.raises(StagingError) as err:
        stage(Stager(), PosixStorage(str(tmp_path / "s")), device, "/nope.dat")
    assert err.value.permanent
    assert_nothing_left(device)


def test_cancel_mid_copy(tmp_path):
    make_tree(tmp_path / "s", {"/f.dat": 500_000})
    device = PosixDevice(str(tmp_path / "dev"))
    job = StagingJob("/f.dat", PosixStorage(str(tmp_path / "s")), device)
    after_each_chunk(job.storage, job.cancel.set)
    with pytest.raises(StagingCancelled):
        Stager(buffer_size=64 * 1024).stage(job)
    assert_nothing_left(device)


def test_unknown_checksum_refused_at_start():
    with pytest.raises(ValueError):
        Stager(checksum="md17")


@pytest.mark.parametrize("kind", ["xrootd", "http"])
def test_remote_source_vanishing_or_changing_mid_copy(kind, request, tmp_path):
    """The same faults against a real xrootd and a real HTTP server: nothing partial survives."""
    server = request.getfixturevalue("xrootd_server" if kind == "xrootd" else "http_server")
    files = make_tree(server.root, {"/store/v.dat": 3_000_000, "/store/c.dat": 3_000_000})
    os.chmod(server.root / "store", 0o777)
    device = PosixDevice(str(tmp_path / "dev"))

    def vanish(job):
        if job.done_bytes >= 64 * 1024:
            (server.root / job.lfn.lstrip("/")).unlink(missing_ok=True)

    def change(job):
        path = server.root / job.lfn.lstrip("/")
        if job.done_bytes >= 64 * 1024 and path.stat().st_size == len(files[job.lfn]):
            with open(path, "ab") as fh:
                fh.write(b"appended")

    for lfn, fault, why in (("/store/v.dat", vanish, "vanished"), ("/store/c.dat", change, "changed|grew")):
        storage = XRootDStorage(server.url + "/", {"timeout": 5}) if kind == "xrootd" else HTTPStorage(server.url)
        job = StagingJob(lfn, storage, device)
        after_each_chunk(storage, lambda fault=fault, job=job: fault(job))
        with pytest.raises(StagingError, match=why):
            Stager(buffer_size=64 * 1024).stage(job)
        assert_nothing_left(device)
