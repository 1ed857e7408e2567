"""Prometheus metrics in the text exposition format (version 0.0.4).

Counters and gauges with labels, plus gauges computed on scrape by a
callback, so a component can publish e.g. its queue length without keeping
a copy of it up to date.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from typing import Any, SupportsFloat

__all__ = ["Registry", "Counter", "Gauge"]

LabelValues = tuple[str, ...]
#: what a gauge's callback returns: its value, or ``{label value or tuple of them: value}`` when labelled
Reading = SupportsFloat | dict[Any, Any]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help: str, labels: Iterable[str] = ()):
        self.name, self.help, self.labels = name, help, tuple(labels)
        self._values: dict[LabelValues, float] = {}
        self._lock = threading.Lock()  # guards _values: any thread counts, a scrape copies them

    def _key(self, labels: dict[str, str]) -> LabelValues:
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.name}: labels {sorted(labels)} != {sorted(self.labels)}")
        return tuple(str(labels[name]) for name in self.labels)

    def samples(self) -> Iterable[tuple[LabelValues, float]]:
        with self._lock:
            return list(self._values.items())

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for key, value in self.samples():
            if key:
                pairs = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(self.labels, key))
                lines.append(f"{self.name}{{{pairs}}} {_fmt(value)}")
            else:
                lines.append(f"{self.name} {_fmt(value)}")
        return lines


class Counter(_Metric):
    """A monotonically increasing count (name it ``*_total``)."""

    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount


class Gauge(_Metric):
    """A value that goes up and down, set directly or computed on scrape."""

    kind = "gauge"

    def __init__(self, name: str, help: str, labels: Iterable[str] = (), callback: Callable[[], Reading] | None = None):
        super().__init__(name, help, labels)
        self._callback = callback

    def set(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def samples(self) -> Iterable[tuple[LabelValues, float]]:
        if self._callback is None:
            return super().samples()
        result = self._callback()
        if isinstance(result, dict):  # {label-tuple: value} for labelled callbacks
            return [(tuple(map(str, k if isinstance(k, tuple) else (k,))), float(v)) for k, v in result.items()]
        return [((), float(result))]


class Registry:
    """The node's metrics; ``render()`` is what ``GET /metrics`` returns."""

    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}
        self._lock = threading.Lock()  # guards _metrics (registration); gauge callbacks run outside it

    def _add(self, metric: _Metric) -> _Metric:
        with self._lock:
            existing = self._metrics.get(metric.name)
            if existing is not None:
                if type(existing) is not type(metric) or existing.labels != metric.labels:
                    raise ValueError(f"metric {metric.name} registered twice with different shapes")
                return existing
            self._metrics[metric.name] = metric
            return metric

    def counter(self, name: str, help: str, labels: Iterable[str] = ()) -> Counter:
        return self._add(Counter(name, help, labels))  # type: ignore[return-value]

    def gauge(self, name: str, help: str, labels: Iterable[str] = (),
              callback: Callable[[], Reading] | None = None) -> Gauge:
        return self._add(Gauge(name, help, labels, callback))  # type: ignore[return-value]

    def render(self) -> str:
        with self._lock:
            metrics = list(self._metrics.values())
        lines: list[str] = []
        for metric in metrics:
            try:
                lines.extend(metric.render())
            except Exception:  # noqa: BLE001 - a failing callback must not break the scrape
                continue
        return "\n".join(lines) + "\n"
