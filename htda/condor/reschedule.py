"""Ask the schedd to negotiate once jobs are steered, so they need not wait for the next cycle.

The job router edits a job in place after HTDA's translate hook answers; by
then the schedd's reschedule of the submission has come and gone, and the
job (which may match only once routed where the site has jobs wait for
``HTDA_Routed``, as ``docs/htcondor.rst`` suggests) waits for the next
cycle: up to ``NEGOTIATOR_INTERVAL`` (60 s by default).  ``condor_reschedule`` asks the schedd to send its submitter ads
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

import threading

from ..node.clock import SYSTEM_CLOCK, Clock
from .tool import CondorTool

__all__ = ["Rescheduler", "DELAY"]

#: seconds from the first routing of a burst to the reschedule: the router's edits of that poll land first
DELAY = 1.0


class Rescheduler:
    """Runs ``tool`` (``condor_reschedule``) ``delay`` seconds after :meth:`routed` was first called since the last
    run; thread-safe (``_lock`` guards ``_due``)."""

    def __init__(self, tool: CondorTool, *, delay: float = DELAY, clock: Clock = SYSTEM_CLOCK):
        self.tool, self.delay, self.clock = tool, delay, clock
        self._lock = threading.Lock()
        self._due: float | None = None  # when the armed reschedule runs; None: not armed

    def routed(self) -> None:
        """A job was steered: arm a reschedule, unless one is armed already."""
        if not self.tool:
            return
        with self._lock:
            if self._due is None:
                self._due = self.clock.monotonic() + self.delay

    def tick(self) -> bool | None:
        """Run the armed reschedule if it is due (the agent's loop calls this often): None if it did not run, else
        whether it succeeded."""
        with self._lock:
            if self._due is None or self.clock.monotonic() < self._due:
                return None
            self._due = None
        return self.tool.run() is not None
