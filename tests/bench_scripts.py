"""Loading a script of ``bench/`` as a module, for the tests that check its pieces (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench_script(relative: str, name: str) -> ModuleType:
    """``bench/<relative>`` run as the module ``name``, registered in ``sys.modules`` (a script's dataclasses look
    their module up there)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / relative)
    assert spec is not None and spec.loader is not None, f"no script bench/{relative}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
