"""Where the tests find HTCondor: ``HTDA_CONDOR_HOME``, else ``../shared/htcondor`` beside the
checkout, else the installation that holds ``condor_master`` on ``PATH``; a single tool
(:func:`condor_tool`, e.g. ``condor_config_val``) also from ``PATH`` alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["condor_home", "condor_tool", "SHARED", "INSTALL_HINT"]

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "htcondor"
INSTALL_HINT = ("no HTCondor: set HTDA_CONDOR_HOME, or put a build in ../shared/htcondor "
                "(../shared/htcondor-notes/README.md), or install HTCondor 25.x so condor_master is on PATH")


def _is_home(path: Path) -> bool:
    return (path / "sbin" / "condor_master").is_file() and (path / "bin" / "condor_config_val").is_file()


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
