"""Sampling during a run: bytes over the storage link, CPU and memory of daemons (from /proc)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from testkit.processes import ProcSample, proc_sample

from .topology import Host, Topology

__all__ = ["ProcSample", "proc_sample", "Monitor"]

@dataclass
class Monitor:
    """A thread sampling the storage link and the given processes every ``interval`` seconds."""

    topo: Topology
    link: Host
    pids: dict[str, int]
    interval: float = 1.0
    link_samples: list[tuple[float, int, int]] = field(default_factory=list)
    proc_samples: dict[str, list[ProcSample]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def start(self) -> "Monitor":
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        counters = self.topo.link_bytes(self.link)
        self.link_samples.append((time.time(), counters["tx"], counters["rx"]))
        for name, pid in self.pids.items():
            sample = proc_sample(pid)
            if sample is not None:
                self.proc_samples.setdefault(name, []).append(sample)

    def link_bytes(self) -> int:
        """Bytes the link carried in both directions between the first and last sample."""
        (_, tx0, rx0), (_, tx1, rx1) = self.link_samples[0], self.link_samples[-1]
        return (tx1 - tx0) + (rx1 - rx0)

    def daemon_stats(self) -> dict[str, dict[str, float]]:
        """Per process: average CPU (fraction of one core) over the run, mean and peak RSS in bytes."""
        out = {}
        for name, samples in self.proc_samples.items():
            if len(samples) < 2:
                continue
            span = samples[-1].time - samples[0].time
            rss = [s.rss for s in samples]
            out[name] = {"cpu": (samples[-1].cpu - samples[0].cpu) / span if span > 0 else 0.0,
                         "rss_mean": sum(rss) / len(rss), "rss_peak": max(rss)}
        return out
