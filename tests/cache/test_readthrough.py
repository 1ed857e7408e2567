"""The worker's read-through proxy: its configuration, as docs/cache.rst shows it and ``htda readthrough-config``
prints it (the real proxy it configures is started by tests/cache/test_readahead.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from htda.cache.readthrough import ReadThroughProxy

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cache.rst"


def _docs_block() -> str:
    """The code block of docs/cache.rst that follows the readthrough-config example."""
    text = DOCS.read_text()
    after = text[text.index("htda readthrough-config --origin"):]
    block = after[after.index(".. code-block:: text\n\n") + len(".. code-block:: text\n\n"):]
    lines = []
    for line in block.splitlines():
        if not line.startswith("   "):
            break
        lines.append(line[3:])
    return "\n".join(lines) + "\n"


def test_the_docs_show_what_the_command_prints():
    printed = subprocess.run([sys.executable, "-m", "htda.cli", "readthrough-config", "--origin",
                              "storage.example.org:1094", "--files", "50GiB"], capture_output=True, text=True,
                             check=True).stdout
    assert printed == _docs_block()
    assert "pfc.diskusage 0.90 0.95 files 25600m 38400m 51200m purgeinterval 60" in printed


def test_a_proxy_with_a_disk_of_its_own_sets_the_watermarks_and_no_file_cap():
    config = ReadThroughProxy(origin="10.0.0.1:1094", root="/srv/rt", port=2000, ram="512m", disk="0.8 0.9",
                              adminpath="/run/rt").render()
    assert "pfc.diskusage 0.8 0.9 purgeinterval 60\n" in config and "files" not in config
    assert config.splitlines()[1] == "xrd.port 2000" and "pfc.ram 512m" in config
    assert "all.adminpath /run/rt\nall.pidpath /run/rt\n" in config


@pytest.mark.parametrize("options, problem", [
    ({"origin": "storage"}, "must be host:port"),
    ({"root": "relative/dir"}, "must be an absolute path"),
    ({"port": 0}, "is not a TCP port"),
    ({"files": -1}, "files must be >= 0"),
    ({"files": 1 << 30, "disk": "0.8 0.9"}, "give files or disk, not both"),
    ({"origin": "a:1\npfc.ram 100g"}, "origin .* must be one word"),
    ({"root": "/r /s"}, "root .* must be one word"),
    ({"disk": "0.9"}, "must be two shares of the disk"),
    ({"disk": "0.95 0.9"}, "must be two shares of the disk"),
])
def test_bad_settings_are_refused_by_name(options, problem):
    with pytest.raises(ValueError, match=problem):
        ReadThroughProxy(**{"origin": "a:1", "root": "/r", **options})


def test_a_bad_size_on_the_command_line_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "htda.cli", "readthrough-config", "--origin", "a:1", "--files",
                           "lots"], capture_output=True, text=True)
    assert done.returncode == 2 and "'lots' is not a size" in done.stderr


def test_sizes_are_read_as_the_simulator_reads_them():
    from htda.units import parse_bytes

    assert parse_bytes("50G") == 50 * 10**9 and parse_bytes("1.5TiB") == 3 * 2**39 and parse_bytes("512mib") == 2**29
    assert parse_bytes("123456") == 123456 and parse_bytes(" 2kB ") == 2000
    assert parse_bytes(str(2**63 - 1)) == 2**63 - 1  # the most a signed 64-bit count holds, exactly
    for bad in ("lots", "-5G", "inf", "1e400", "5X", "1e30", str(2**63), "nan"):
        with pytest.raises(ValueError, match="size"):
            parse_bytes(bad)
