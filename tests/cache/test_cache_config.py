"""Bad cache configs stop start-up with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from htda.node.config import ConfigError
from htda.node.runtime import Node, load_config
from testkit.nodes import free_port, write_config


@pytest.mark.parametrize("section, message", [
    ({"union": "aufs"}, "'cache.union' names no htda.union plugin"),
    ({"storage": "nfs"}, "'cache.storage' names no htda.storage plugin"),
    ({"devices": [{"path": "d", "backend": "zfs"}]}, "'cache.devices[0].backend'"),
    ({"devices": [{"path": "d", "backend": "logical"}]}, "'cache.devices[0].backend'"),  # made by the node itself
    ({"devices": [{"path": "d", "high_watermark": 1.5}]}, "'cache.devices[0].high_watermark' must be a fraction"),
    ({"checksum": "md17"}, "'cache.checksum' must be one of"),
    ({"verify_on_start": "maybe"}, "'cache.verify_on_start'"),
    ({"max_staging": 0}, "'cache.max_staging' must be greater than 0"),
    ({"storage": "xrootd", "storage_location": "http://x/"}, "'cache.storage_location'"),
    ({"storage": "http", "storage_location": "/a/dir"}, "'cache.storage_location'"),
    ({"remote_owner": "no-such-user-htda"}, "'cache.remote_owner' names no user on this host"),
    ({"remote_group": "no-such-group-htda"}, "'cache.remote_group' names no group on this host"),
    ({"remote_group": "4000000000"}, "'cache.remote_group' names no group on this host"),
    ({"remote_file_mode": "0649"}, "'cache.remote_file_mode' must be an octal mode"),
    ({"remote_file_mode": "rw-r-----"}, "'cache.remote_file_mode' must be an octal mode"),
    ({"remote_dir_mode": "4750"}, "'cache.remote_dir_mode' must be an octal mode: '4750': only permission bits"),
    # the default pool.read_networks is loopback, where the worker's jobs are
    ({"listings_unsigned": True}, "'cache.listings_unsigned' would let jobs on this worker list its copies"),
])
def test_bad_cache_config_is_one_clear_line(tmp_path, section, message):
    port = free_port()
    path = write_config(tmp_path, "cfg", ["cache"], port, [], sections={"cache": section})
    with pytest.raises(ConfigError) as err:
        Node(load_config(path))
    assert message in str(err.value) and str(path) in str(err.value)


def test_remote_rule_takes_names_numbers_and_octal_modes(tmp_path):
    path = write_config(tmp_path, "cfg", ["cache"], free_port(), [], sections={"cache": {
        "remote_owner": "0", "remote_group": "root", "remote_file_mode": "0o640", "remote_dir_mode": "750"}})
    rule = Node(load_config(path)).components["cache"].remote_rule
    assert (rule.uid, rule.gid, rule.file_mode, rule.dir_mode) == (0, 0, 0o640, 0o750)


def test_example_configs_load():
    for name in ("worker", "all-in-one"):
        config = load_config(Path(__file__).resolve().parents[2] / "config" / f"{name}.toml")
        assert config["cache"]["devices"], name
