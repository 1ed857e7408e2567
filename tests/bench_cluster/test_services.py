"""Cache areas of the cluster benchmark: XCache's own filesystem and what a cache holds on disk."""

from __future__ import annotations

import os

import pytest

from bench.cluster.runner import RunConfig
from bench.cluster.services import dedicated_filesystem, disk_bytes, mounts_under, unmount_all

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
MB = 1 << 20


@needs_root
def test_a_dedicated_filesystem_has_its_size_and_leaves_with_the_run(tmp_path):
    data = tmp_path / "run" / "xcache-data"
    dedicated_filesystem(data, 64 * MB)
    try:
        assert str(data) in mounts_under(tmp_path / "run")
        fs = os.statvfs(data)
        assert 60 * MB < fs.f_blocks * fs.f_frsize <= 64 * MB
        with pytest.raises(OSError):  # it is a cap: a file larger than the filesystem does not fit
            with open(data / "big", "wb") as out:
                for _ in range(80):
                    out.write(b"x" * MB)
                    out.flush()
                    os.fsync(out.fileno())
    finally:
        unmount_all(tmp_path / "run")
    assert mounts_under(tmp_path / "run") == []


def test_disk_bytes_counts_allocated_blocks_not_lengths(tmp_path):
    (tmp_path / "sub").mkdir()
    with open(tmp_path / "sub" / "sparse", "wb") as out:  # a cache's file of which one block was fetched
        out.truncate(100 * MB)
        out.seek(10 * MB)
        out.write(b"y" * MB)
    (tmp_path / "full").write_bytes(b"z" * (2 * MB))
    assert 3 * MB <= disk_bytes(tmp_path) < 3 * MB + 64 * 1024
    assert disk_bytes(tmp_path / "missing") == 0


def test_xcache_gets_as_much_disk_as_htdas_devices_unless_told():
    assert RunConfig(workers=4, cache_mb=300).xcache_disk_mb == 1200
    assert RunConfig(workers=4, cache_mb=300, xcache_disk_mb=0).xcache_disk_mb == 0
    with pytest.raises(ValueError, match="xcache_disk_mb"):
        RunConfig(xcache_disk_mb=-1)


def test_the_read_through_proxies_keep_a_small_share_beside_the_device_unless_told():
    assert RunConfig(cache_mb=1024).readthrough_mb == 128
    assert RunConfig(cache_mb=300, readthrough_mb=0).readthrough_mb == 0
    with pytest.raises(ValueError, match="readthrough_mb"):
        RunConfig(readthrough_mb=-5)
