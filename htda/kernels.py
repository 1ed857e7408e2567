"""HTDA's C kernels (``htda/coordinator/_adaptive.c``, ``htda/simulator/_replay.c``, built by ``setup.py``):
what an import says when they are not built."""

from __future__ import annotations

__all__ = ["not_built"]


def not_built(exc: ImportError) -> ImportError:
    """The error to raise when importing a kernel failed with ``exc`` (a source tree used without installing it)."""
    return ImportError(f"HTDA's C kernels are not built ({exc}): install HTDA (`make .venv/.installed`, "
                       "`pip install -e .`) or build them in place (`python setup.py build_ext --inplace`)")
