"""What ``pip install .`` ships: every folder of Python modules under htda/ is a package setup.py finds."""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[1]


def test_every_module_folder_is_shipped():
    shipped = set(find_packages(where=str(REPO), include=["htda", "htda.*"]))
    folders = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "htda").rglob("*.py")}
    assert folders <= shipped, f"not packages (no __init__.py), so missing from the wheel: {sorted(folders - shipped)}"


def test_nothing_test_only_is_imported_by_the_daemon_entry_points():
    import subprocess
    import sys

    probe = ("import sys, htda.node.daemon, htda.cli; "
             "print(sorted(m for m in sys.modules if m.startswith(('pytest', 'hypothesis', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_htda_help_loads_neither_numpy_nor_sqlalchemy():
    import subprocess
    import sys

    probe = ("import sys, htda.cli; htda.cli.build_parser(); "
             "print(sorted(m for m in ('numpy', 'sqlalchemy', 'cherrypy', 'cheroot') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_test_helper_ships():
    shipped = set(find_packages(where=str(REPO), include=["htda", "htda.*"]))
    assert not {p for p in shipped if p.endswith(".testing") or "testkit" in p}
    assert not list((REPO / "htda").rglob("testing.py"))
