"""Where the tests and the benches find HTCondor: ``HTDA_CONDOR_HOME``, else ``../shared/htcondor`` beside the
checkout, else the installation that holds ``condor_master`` on ``PATH``; a single tool
(:func:`condor_tool`, e.g. ``condor_config_val``) also from ``PATH`` alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["condor_home", "condor_tool", "program", "pool_basics", "SHARED", "INSTALL_HINT"]

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "htcondor"
INSTALL_HINT = ("no HTCondor: set HTDA_CONDOR_HOME, or put a build in ../shared/htcondor "
                "(../shared/htcondor-notes/README.md), or install HTCondor 25.x so condor_master is on PATH")


def _is_home(path: Path) -> bool:
    return (path / "sbin" / "condor_master").is_file() and all(
        (path / "bin" / tool).is_file() for tool in ("condor_config_val", "condor_submit"))


def condor_home() -> Path | None:
    """The HTCondor release directory (with ``sbin/condor_master``), or None when there is none."""
    env = os.environ.get("HTDA_CONDOR_HOME")
    candidates = [Path(env)] if env else []
    candidates.append(SHARED)
    master = shutil.which("condor_master")
    if master:
        candidates.append(Path(master).resolve().parent.parent)
    return next((path.resolve() for path in candidates if _is_home(path)), None)


def condor_tool(name: str) -> Path | None:
    """An HTCondor program (``bin/NAME``) of :func:`condor_home`, else ``NAME`` on ``PATH``, else None."""
    home = condor_home()
    if home is not None and (home / "bin" / name).is_file():
        return home / "bin" / name
    found = shutil.which(name)
    return Path(found).resolve() if found else None


def program(home: Path, name: str) -> Path:
    """The executable behind tool ``name`` (``bin/`` or ``sbin/``).  Tools such as condor_reconfig are links
    to one program that acts on its argv[0]; a copy that flattened the links holds text files naming the
    target (``./condor_on``), so follow those."""
    path = home / "bin" / name
    path = path if path.exists() else home / "sbin" / name
    if path.stat().st_size < 64 and not os.access(path, os.X_OK):
        path = (path.parent / path.read_text().strip()).resolve()
    return path


def pool_basics(home: Path, local: Path, config_dir: Path, condor_ids: tuple[int, int], domain: str) -> list[str]:
    """The configuration lines every pool of the tests and benches shares: where things are, the account the
    daemons drop to, no shared port, FS authentication within ``domain``, and nothing tuned on the host."""
    return [
        f"RELEASE_DIR = {home}", f"LOCAL_DIR = {local}", f"LOCAL_CONFIG_DIR = {config_dir}",
        "LOG = $(LOCAL_DIR)/log", "SPOOL = $(LOCAL_DIR)/spool", "EXECUTE = $(LOCAL_DIR)/execute",
        "LOCK = $(LOCAL_DIR)/lock", "RUN = $(LOCAL_DIR)/run",
        f"CONDOR_IDS = {condor_ids[0]}.{condor_ids[1]}",
        "BIND_ALL_INTERFACES = False", "USE_SHARED_PORT = False",
        f"UID_DOMAIN = {domain}", f"FILESYSTEM_DOMAIN = {domain}", "TRUST_UID_DOMAIN = True",
        "SEC_DEFAULT_AUTHENTICATION = REQUIRED", "SEC_DEFAULT_AUTHENTICATION_METHODS = FS",
        "SEC_CLIENT_AUTHENTICATION_METHODS = FS",
        "SEC_DEFAULT_ENCRYPTION = OPTIONAL", "SEC_DEFAULT_INTEGRITY = OPTIONAL",
        "ALLOW_READ = *", "ALLOW_WRITE = *@$(UID_DOMAIN)",
        "ALLOW_DAEMON = condor@$(UID_DOMAIN) root@$(UID_DOMAIN)",
        "ALLOW_NEGOTIATOR = condor@$(UID_DOMAIN) root@$(UID_DOMAIN)",
        "ALLOW_ADMINISTRATOR = condor@$(UID_DOMAIN) root@$(UID_DOMAIN)",
        "RUNBENCHMARKS = 0",
        "LINUX_KERNEL_TUNING_SCRIPT =",  # a master started as root would raise this host's sysctls
    ]
