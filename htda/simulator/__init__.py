"""The cache simulator: replay access traces through HTDA's rating and placement, the classic and modern
baselines, and the offline bounds (``htda simulate``, ``htda trace generate``; see docs/simulator.rst).

Nothing here imports numpy: ``htda --help`` builds the simulator's parsers from this package and
:mod:`.generator`'s parameters alone.
"""

#: requests read (or generated) per chunk of a replay
DEFAULT_CHUNK = 65536
#: the formats a trace may be given in (``htda simulate --format``, :func:`.trace.trace_reader`); "auto" tells them
#: by the name
TRACE_FORMATS = ("auto", "csv", "oracleGeneral", "vscsi")


class TraceError(ValueError):
    """A malformed trace; the message names the file and line."""
