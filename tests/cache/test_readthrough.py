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
                              "storage.example.org:1094", "--files", "50g"], capture_output=True, text=True,
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
])
def test_bad_settings_are_refused_by_name(options, problem):
    with pytest.raises(ValueError, match=problem):
        ReadThroughProxy(**{"origin": "a:1", "root": "/r", **options})


def test_a_bad_size_on_the_command_line_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "htda.cli", "readthrough-config", "--origin", "a:1", "--files",
                           "lots"], capture_output=True, text=True)
    assert done.returncode == 2 and "'lots' is not a size" in done.stderr
