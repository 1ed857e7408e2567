"""Child processes that tests and benchmarks start (servers, browsers, nodes): stopping and measuring them."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcSample", "ProcessExited", "proc_sample", "stop_process"]

TICKS = os.sysconf("SC_CLK_TCK")


class ProcessExited(RuntimeError):
    """A server the test waits for has exited: waiting longer cannot help (:func:`testkit.nodes.wait_until`
    raises it at once)."""


@dataclass
class ProcSample:
    """CPU seconds (user + system) and resident memory of one process at one time."""

    time: float
    cpu: float
    rss: int


def proc_sample(pid: int) -> ProcSample | None:
    """Read /proc/<pid>/stat (utime, stime) and /proc/<pid>/status (VmRSS); None once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    rss = next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return ProcSample(time.time(), cpu, rss)


def stop_process(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM ``proc``, wait up to ``timeout`` seconds, then SIGKILL it; a no-op if it already ended."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
