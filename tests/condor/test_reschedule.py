"""The reschedule after routing (:mod:`htda.condor.reschedule`): real commands, an injected clock."""

from __future__ import annotations

import logging
import sys

from htda.condor.reschedule import Rescheduler
from htda.condor.tool import CondorTool
from testkit.clock import FakeClock

LOG = logging.getLogger("test-reschedule")


def recorder(tmp_path) -> list[str]:
    """A command that appends the CONDOR_CONFIG it was given to a file, one line a run."""
    out = tmp_path / "runs"
    code = f"import os; open({str(out)!r}, 'a').write(os.environ.get('CONDOR_CONFIG', '-') + '\\n')"
    return [sys.executable, "-c", code]


def tool(command: list[str], condor_config: str = "") -> CondorTool:
    return CondorTool(command, condor_config, what="reschedule", fallback="none", log=LOG)


def runs(tmp_path) -> list[str]:
    path = tmp_path / "runs"
    return path.read_text().splitlines() if path.exists() else []


def test_one_run_per_burst_of_routings_after_the_delay(tmp_path):
    clock = FakeClock()
    r = Rescheduler(tool(recorder(tmp_path), "/etc/pool/condor_config"), delay=1.0, clock=clock)
    assert r.tick() is None  # nothing routed: nothing to do
    r.routed()
    clock.advance(0.5)
    r.routed()  # rides on the armed one
    assert r.tick() is None and runs(tmp_path) == []
    clock.advance(0.5)
    assert r.tick() is True
    assert r.tick() is None  # disarmed
    assert runs(tmp_path) == ["/etc/pool/condor_config"]
    r.routed()
    clock.advance(1.0)
    assert r.tick() is True and len(runs(tmp_path)) == 2 and (r.tool.runs, r.tool.failures) == (2, 0)


def test_an_empty_command_never_runs(tmp_path):
    clock = FakeClock()
    r = Rescheduler(tool([]), clock=clock)
    r.routed()
    clock.advance(5.0)
    assert r.tick() is None and r.tool.runs == 0


def test_a_failing_or_missing_command_is_logged_once_and_counted(tmp_path, caplog):
    clock = FakeClock()
    for command, why in (([sys.executable, "-c", "import sys; sys.exit('no schedd')"], "exit 1: no schedd"),
                         ([str(tmp_path / "absent")], "No such file")):
        r = Rescheduler(tool(command), clock=clock)
        with caplog.at_level(logging.DEBUG, logger=LOG.name):
            for _ in range(3):
                r.routed()
                clock.advance(1.0)
                assert r.tick() is False
        assert r.tool.failures == 3
        warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
        assert len(warnings) == 1 and why in warnings[0].getMessage()
        caplog.clear()
