"""Child processes that tests and benchmarks start (servers, browsers, nodes): stopping and measuring them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Proc", "ProcSample", "ProcessExited", "kill_where", "proc_sample", "stop_process"]

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


@dataclass(frozen=True)
class Proc:
    """A running process as /proc shows it: its parent, its command name and its arguments."""

    pid: int
    ppid: int
    comm: str
    argv: list[bytes]


def kill_where(match: Callable[[Proc], bool]) -> int:
    """SIGKILL every process ``match`` picks (processes that end meanwhile are skipped); how many were killed."""
    killed = 0
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            proc = Proc(int(entry), int(fields[1]), Path(f"/proc/{entry}/comm").read_text().strip(),
                        Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0"))
            if match(proc):
                os.kill(proc.pid, signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue  # gone meanwhile
    return killed
