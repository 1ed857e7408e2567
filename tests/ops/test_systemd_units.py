"""The systemd units in ``systemd/`` pass ``systemd-analyze verify`` and keep their hardening."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"
INSTALLED_BINARY = "/usr/bin/htda-node"

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                reason="systemd-analyze missing (apt-get install systemd)")


@pytest.fixture
def unit_dir(tmp_path: Path) -> Path:
    """The units with ExecStart pointing at this environment's htda-node (verify checks it is executable)."""
    # the environment running the tests (a venv's bin is not always on PATH), then PATH
    binary = shutil.which("htda-node", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    if binary is None:
        pytest.skip("htda-node is not installed (pip install -e .)")
    for unit in UNITS.glob("*.service"):
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED_BINARY, binary))
    return tmp_path


def _analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("template", ["htda-node@.service", "htda-cache@.service"])
def test_unit_verifies_without_warnings(unit_dir: Path, template: str) -> None:
    instance = unit_dir / template.replace("@.", "@site.")
    result = _analyze("verify", "--man=no", str(instance), cwd=unit_dir)
    # verify exits 0 on unknown keys and bad values but prints them: any output is a failure.
    assert result.returncode == 0 and not result.stderr.strip() and not result.stdout.strip(), result.stderr


def test_verify_catches_a_broken_unit(unit_dir: Path) -> None:
    """The check above can fail: a typo in a key is reported."""
    broken = unit_dir / "broken@.service"
    broken.write_text((unit_dir / "htda-node@.service").read_text().replace("Restart=", "Restrat="))
    result = _analyze("verify", "--man=no", str(unit_dir / "broken@site.service"), cwd=unit_dir)
    assert "Restrat" in result.stderr


@pytest.mark.parametrize("template,limit", [("htda-node@.service", 2.0), ("htda-cache@.service", 6.0)])
def test_exposure_stays_low(unit_dir: Path, template: str, limit: float) -> None:
    instance = template.replace("@.", "@site.")
    result = _analyze("security", "--offline=true", "--no-pager", instance, cwd=unit_dir)
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout + result.stderr)
    assert match, result.stdout[-500:] + result.stderr[-500:]
    assert float(match.group(1)) <= limit


@pytest.mark.parametrize("template", ["htda-node@.service", "htda-cache@.service"])
def test_unit_contract(template: str) -> None:
    """Type=notify (the daemon sends READY=1), restart on failure, one config per instance."""
    text = (UNITS / template).read_text()
    for line in ("Type=notify", "Restart=on-failure", "NoNewPrivileges=true",
                 f"ExecStart={INSTALLED_BINARY} --config /etc/htda/%i.toml"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), line


def test_service_roles_get_a_read_only_system() -> None:
    text = (UNITS / "htda-node@.service").read_text()
    assert re.search(r"^ProtectSystem=strict$", text, re.M)
    assert re.search(r"^ReadWritePaths=/var/lib/htda$", text, re.M)
    assert re.search(r"^CapabilityBoundingSet=$", text, re.M)
