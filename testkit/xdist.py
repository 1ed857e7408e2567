"""How the test suite shares pytest-xdist workers (``-n auto`` in pyproject's addopts; hooks in tests/conftest.py).

xdist's own ``--dist loadgroup`` does not group with pytest 9 (it renames ``item._nodeid``, which pytest 9 no
longer reads), so the grouping is a scheduler of our own: each test is a unit of its own, except

* the tests of :data:`SHARED_POOL` (one HTCondor personal pool per session): one worker runs them all, so
  the pool is started once and never twice at the same time;
* the modules of :data:`SHARED_FIXTURE`, whose module-scoped fixture starts a node or writes a dataset:
  one worker runs each, so that fixture is made once, not once per worker.

Tests marked ``slow`` (end-to-end runs that expect the machine to themselves, as they had it when the suite
ran in one process) take :func:`slow_lock` around their whole run, so no two of them overlap.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

__all__ = ["GroupScheduling", "slow_lock", "SHARED_POOL", "SHARED_FIXTURE"]

SHARED_POOL = ("tests/htcondor/",)
SHARED_FIXTURE = ("tests/ops/test_hostile_input.py", "tests/ops/test_fuzz.py", "tests/node/test_bodies.py",
                  "tests/bench_cluster/test_analysis_report.py")


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with a scope per test, but for the groups above (see the module's docstring)."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        if path.startswith(SHARED_POOL):
            return SHARED_POOL[0]
        return path if path in SHARED_FIXTURE else nodeid


@contextlib.contextmanager
def slow_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock shared by every worker of this run (``run_dir``: the workers' common base)."""
    with open(run_dir / "slow-tests.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
