"""No LFN, however crafted, and no symlink planted on disk leads a lookup outside its root."""

from __future__ import annotations

import os

import pytest

from htda.cache.backends.base import StorageError
from htda.cache.backends.posix import PosixDevice, PosixStorage
from htda.cache.confine import ConfinementError, open_beneath
from htda.cache.staging import Stager, StagingError, StagingJob
from htda.cache.union.symlink import SymlinkDriver

HOSTILE = ["/../etc/passwd", "../../etc/passwd", "/store/../../etc/passwd", "/store/a\x00b", "/store/./x",
           "/" + "a" * 256, "/" + "/".join(["d" * 200] * 25), "", "/", "\\..\\etc", "/store/\n"]


@pytest.fixture
def planted(tmp_path):
    """Storage with a secret outside it and symlinks inside pointing at the secret."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    storage = tmp_path / "storage"
    (storage / "store").mkdir(parents=True)
    (storage / "store/ok.dat").write_bytes(b"fine")
    os.symlink(outside / "secret.txt", storage / "store/link.dat")
    os.symlink(outside, storage / "store/linkdir")
    os.symlink("../../outside/secret.txt", storage / "store/rel.dat")
    return storage


@pytest.mark.parametrize("lfn", HOSTILE)
def test_hostile_lfns_are_refused_everywhere(tmp_path, planted, lfn):
    storage, device = PosixStorage(str(planted)), PosixDevice(str(tmp_path / "dev"))
    for call in (lambda: storage.stat(lfn), lambda: device.open(lfn), lambda: device.stat(lfn),
                 lambda: device.delete(lfn), lambda: storage.read(lfn, lambda c: None)):
        with pytest.raises(ValueError):
            call()


@pytest.mark.parametrize("lfn", ["/store/link.dat", "/store/rel.dat", "/store/linkdir/secret.txt"])
def test_symlinks_planted_in_storage_are_not_followed(tmp_path, planted, lfn):
    storage = PosixStorage(str(planted))
    with pytest.raises(StorageError):
        storage.stat(lfn)
    with pytest.raises(StorageError):
        storage.read(lfn, lambda c: None)
    device = PosixDevice(str(tmp_path / "dev"))
    with pytest.raises(StagingError):
        Stager().stage(StagingJob(lfn, storage, device))
    assert list(device.scan()) == [] and os.listdir(device.staging_dir) == []
    assert storage.stat("/store/ok.dat").size == 4


def test_symlinks_planted_in_a_cache_device_are_ignored(tmp_path, planted):
    device = PosixDevice(str(tmp_path / "dev"))
    os.makedirs(os.path.join(device.data_dir, "store"))
    os.symlink(planted.parent / "outside/secret.txt", os.path.join(device.data_dir, "store/x.dat"))
    os.symlink(planted.parent / "outside", os.path.join(device.data_dir, "evil"))
    with pytest.raises(ConfinementError):
        device.open("/store/x.dat")
    with pytest.raises(ConfinementError):
        device.open("/evil/secret.txt")
    assert list(device.scan()) == []
    # a commit whose parent is a planted symlinked directory refuses to write through it
    tmp = device.temporary(1)
    os.write(tmp.fd, b"x")
    with pytest.raises(ConfinementError):
        tmp.commit("/evil/new.txt", 1.0, {})
    tmp.discard()
    assert not (planted.parent / "outside/new.txt").exists()


def test_open_beneath_refuses_directory_symlinks(tmp_path):
    (tmp_path / "root/a").mkdir(parents=True)
    os.symlink("/etc", tmp_path / "root/a/etc")
    with pytest.raises(ConfinementError):
        open_beneath(str(tmp_path / "root"), "/a/etc/hostname")


def test_symlink_view_never_links_outside(tmp_path, planted):
    view = tmp_path / "view"
    driver = SymlinkDriver(str(view), [str(tmp_path / "dev/data")], str(planted), str(tmp_path / "state"))
    driver.start([])
    assert (view / "store/ok.dat").read_bytes() == b"fine"
    for name in ("link.dat", "rel.dat", "linkdir"):
        assert not os.path.lexists(view / "store" / name)
    driver.removing("/store/linkdir/secret.txt")  # a removal of a planted path must not create a link to it
    assert not os.path.lexists(view / "store/linkdir")
