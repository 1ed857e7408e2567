"""Running an HTCondor tool from the submit agent: its own pool configuration, a time limit, failures said once.

The agent talks to the schedd only through HTCondor's own tools (``condor_reschedule``,
``condor_q``), as root on the submit host.  A tool that fails costs an optimisation, never a
job: the first failure is logged as a warning (it says what to fix), later ones at debug level.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Sequence

__all__ = ["CondorTool", "TIMEOUT"]

#: seconds a tool may take before it is abandoned
TIMEOUT = 30.0


class CondorTool:
    """``command`` (argv; empty: the tool is off) with ``condor_config`` as ``CONDOR_CONFIG`` if given; ``what`` names
    it in the log, ``fallback`` says what happens instead when it fails.  Used by one thread at a time."""

    def __init__(self, command: Sequence[str], condor_config: str, *, what: str, fallback: str,
                 log: logging.Logger, timeout: float = TIMEOUT):
        self.command = list(command)
        self.env = dict(os.environ, CONDOR_CONFIG=condor_config) if condor_config else None
        self.what, self.fallback, self.log, self.timeout = what, fallback, log, timeout
        self.runs = 0
        self.failures = 0

    def __bool__(self) -> bool:
        return bool(self.command)

    def run(self, *args: str) -> str | None:
        """The tool's standard output; None when it failed (or is off)."""
        if not self.command:
            return None
        self.runs += 1
        try:
            done = subprocess.run([*self.command, *args], env=self.env, capture_output=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            self._failed(str(exc))
            return None
        if done.returncode != 0:
            self._failed(f"exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[-300:]}")
            return None
        return done.stdout.decode(errors="replace")

    def _failed(self, why: str) -> None:
        self.failures += 1
        (self.log.warning if self.failures == 1 else self.log.debug)(
            "%s (%s) failed: %s; %s", self.what, " ".join(self.command), why, self.fallback)
