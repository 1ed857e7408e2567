"""Ask the schedd to negotiate once jobs are steered, so they need not wait for the next cycle.

The job router edits a job in place after HTDA's translate hook answers; by
then the schedd's reschedule of the submission has come and gone, and the
job (which may match only once routed where the site has jobs wait for
``HTDA_Routed``, as ``docs/htcondor.rst`` suggests) waits for the next cycle: up to ``NEGOTIATOR_INTERVAL`` (60 s by
default).  ``condor_reschedule`` asks the schedd to send its submitter ads
and request a cycle from the negotiator (who still keeps
``NEGOTIATOR_MIN_INTERVAL``); it is what ``condor_submit`` does after every
submission.  Where cycles come every few seconds it changes little
(``docs/htcondor.rst``, caveats, has the cluster benchmark's figures).

One reschedule per burst of routings: the first routing arms it, ``delay``
later (the router applies its edits after the hooks of a poll have answered)
it runs, and routings meanwhile ride on it.  A failing command is logged and
counted, never retried at once: a reschedule is an optimisation, and the
negotiator's own cycle still comes.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Sequence

from ..node.clock import SYSTEM_CLOCK, Clock

__all__ = ["Rescheduler", "DELAY", "TIMEOUT"]

#: seconds from the first routing of a burst to the reschedule: the router's edits of that poll land first
DELAY = 1.0
#: seconds a reschedule command may take before it is abandoned
TIMEOUT = 10.0


class Rescheduler:
    """Runs ``command`` ``delay`` seconds after :meth:`routed` was first called since the last run; thread-safe
    (``_lock`` guards ``_due``)."""

    def __init__(self, command: Sequence[str], condor_config: str = "", *, delay: float = DELAY,
                 log: logging.Logger, clock: Clock = SYSTEM_CLOCK):
        self.command = list(command)
        self.env = dict(os.environ, CONDOR_CONFIG=condor_config) if condor_config else None
        self.delay, self.log, self.clock = delay, log, clock
        self._lock = threading.Lock()
        self._due: float | None = None  # when the armed reschedule runs; None: not armed
        self.runs = 0
        self.failures = 0

    def routed(self) -> None:
        """A job was steered: arm a reschedule, unless one is armed already."""
        if not self.command:
            return
        with self._lock:
            if self._due is None:
                self._due = self.clock.monotonic() + self.delay

    def tick(self) -> bool:
        """Run the armed reschedule if it is due (the agent's loop calls this often); whether it ran."""
        with self._lock:
            if self._due is None or self.clock.monotonic() < self._due:
                return False
            self._due = None
        self.runs += 1
        try:
            done = subprocess.run(self.command, env=self.env, capture_output=True, timeout=TIMEOUT,
                                  stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            self._failed(str(exc))
            return True
        if done.returncode != 0:
            self._failed(f"exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[-300:]}")
        return True

    def _failed(self, why: str) -> None:
        self.failures += 1
        # the first failure says what to fix; later ones would repeat it at every burst
        (self.log.warning if self.failures == 1 else self.log.debug)(
            "reschedule after routing (%s) failed: %s; jobs wait for the negotiator's own cycle",
            " ".join(self.command), why)
