"""The STARTD_CRON script: this worker's HTDA name and cache facts for its machine ad.

HTCondor reads ``Attr = value`` lines from it; a line ``-`` ends an ad.  The
names match what the translate hook's ``HTDA_CacheAffinity`` looks for:
``HTDA_NodeName``, and ``HTDA_CacheGroups``, the input keys of the hot input
groups the cache node holds whole (:mod:`htda.cache.groups`), which jobs
routed before those copies existed follow.  The collector sees a cron's
output only at the startd's next update (``UPDATE_INTERVAL``, 300 s by
default), unless the ad ends with ``- update:true``.

Two ways to run it:

- ``--watch`` (the shipped ``STARTD_CRON_HTDA_MODE = WaitForExit``): it
  stays, asks its node every ``watch_interval`` seconds (2 by default, two
  loopback requests), and prints an ad at once when the node's name, state
  or groups change, ending it with ``- update:true`` so that a new copy
  draws waiting jobs from the next negotiation cycle; otherwise it prints
  one every ``refresh`` seconds for the other facts (the startd takes each
  ad as it comes: ``CronJob::StdoutHandler`` publishes at every ``-`` line).
  It reads its settings again in every round and exits when the startd
  stops reading.
- without arguments (``MODE = Periodic``): one ad per run, ending with
  ``- update:true`` when the groups changed within the last ``cron_period``
  seconds (one forced update per change).

When the local node does not answer, the script still prints the name it
expects (from the settings or the host name) with ``HTDA_Up = false``; it
never fails (exit 0).
"""

from __future__ import annotations

import json
import math
import os
import select
import socket
import sys
import time
from collections.abc import Callable

from ..protocol import paths
from .hooks import Setting, node_request, read_settings
from .machine_ad import CACHE_ATTRIBUTES, GROUPS_ATTRIBUTE, NODE_ATTR, UP_ATTR

__all__ = ["MAX_GROUPS", "main", "machine_attributes", "watch"]

#: at most this many keys are published (the coordinator names at most 64 per node)
MAX_GROUPS = 256
_KEY_CHARS = frozenset("0123456789abcdef")


def _groups(cache: dict) -> tuple[str, float | None]:
    """(the comma-separated input keys the cache node reports, when that list last changed, if it says)."""
    keys = cache.get("groups")
    if not isinstance(keys, list):
        return "", None
    valid = [k for k in keys[:MAX_GROUPS] if isinstance(k, str) and 0 < len(k) <= 64 and set(k) <= _KEY_CHARS]
    changed = cache.get("groups_changed")
    if isinstance(changed, bool) or not isinstance(changed, (int, float)) or changed <= 0:
        return ",".join(valid), None
    return ",".join(valid), float(changed)


def machine_attributes(settings: dict[str, Setting], timeout: float = 2.0) -> dict[str, object]:
    """The machine-ad attributes, asking this host's node (``settings['node']``); ``HTDA_CacheGroups`` is
    always there (empty when nothing is known), so a list that emptied replaces the old one."""
    return _attributes(settings, timeout)[0]


def _attributes(settings: dict[str, Setting], timeout: float) -> tuple[dict[str, object], bool]:
    """(the machine-ad attributes, whether the ad should reach the collector at once)."""
    deadline = time.monotonic() + timeout
    node = str(settings["node"])
    attrs: dict[str, object] = {NODE_ATTR: socket.gethostname().split(".", 1)[0], UP_ATTR: False,
                                GROUPS_ATTRIBUTE: ""}
    urgent = False
    try:
        status, body = node_request(node, paths.NODE, deadline)
        if status != 200:
            return attrs, urgent
        me = json.loads(body)
        attrs.update({NODE_ATTR: str(me["name"]), UP_ATTR: True})
        status, body = node_request(node, paths.POOL, deadline)
        members = json.loads(body).get("members", []) if status == 200 else []
        cache = next((m.get("info", {}).get("cache") for m in members if m.get("name") == me["name"]), None)
        if isinstance(cache, dict):
            for key, attr in CACHE_ATTRIBUTES.items():
                if isinstance(cache.get(key), int):
                    attrs[attr] = cache[key]
            attrs[GROUPS_ATTRIBUTE], changed = _groups(cache)
            # the node's clock and this host's are one: the cache node runs here
            urgent = changed is not None and time.time() - changed < float(settings["cron_period"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # the node is down or odd: publish what is known, never fail
    return attrs, urgent


def _literal(value: object) -> str:
    """``value`` in old ClassAd syntax, as the startd reads cron output.

    Old syntax escapes nothing but ``"`` (a backslash is itself, ``\\n`` two characters), and
    has no way to write a line break: control characters are dropped.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = "".join(c for c in str(value) if c.isprintable())
    return '"' + text.replace('"', '\\"') + '"'


def _ad(attrs: dict[str, object], urgent: bool) -> bytes:
    """One ad as the startd reads it, ended by ``-`` (``- update:true``: to the collector at once)."""
    lines = [f"{name} = {_literal(value)}" for name, value in attrs.items()]
    return ("\n".join(lines) + ("\n- update:true\n" if urgent else "\n-\n")).encode()


def _settings() -> dict[str, Setting]:
    settings, problem = read_settings()
    if problem:
        os.write(2, f"htda_startd_cron: {problem}\n".encode())
    return settings


def _startd_reading() -> bool:
    """Whether the startd still holds the read end of standard output (a pipe whose reader is gone polls
    as an error at once; a watch that printed nothing would not learn it from a write)."""
    poller = select.poll()
    poller.register(1, 0)  # no events asked: only POLLERR, POLLHUP and POLLNVAL come back
    return not poller.poll(0)


def watch(write: Callable[[bytes], object], refresh: float = 300.0, rounds: int | None = None,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], object] = time.sleep,
          settings: Callable[[], dict[str, Setting]] = _settings,
          reading: Callable[[], bool] = lambda: True) -> None:
    """Print an ad now, then whenever the node's name, state or groups change (``- update:true``), and at least
    every ``refresh`` seconds; look every ``watch_interval`` seconds of the settings (read again each round);
    ``rounds``: stop after that many looks (None: until ``write`` fails or nobody is ``reading``)."""
    last: tuple | None = None
    printed = -math.inf
    done = 0
    while (rounds is None or done < rounds) and reading():
        current = settings()
        interval = max(0.1, float(current["watch_interval"]))
        attrs = _attributes(current, min(2.0, interval))[0]
        key = (attrs[NODE_ATTR], attrs[UP_ATTR], attrs[GROUPS_ATTRIBUTE])
        now = clock()
        if key != last or now - printed >= refresh:
            write(_ad(attrs, urgent=key != last))
            last, printed = key, now
        done += 1
        if rounds is None or done < rounds:
            sleep(interval)


def main(argv: list[str] | None = None) -> int:
    """Print the attributes and the end-of-ad line, once or (``--watch``) for as long as the startd reads;
    always exit 0."""
    args = sys.argv[1:] if argv is None else argv
    if "--watch" in args:
        try:
            watch(lambda data: os.write(1, data), reading=_startd_reading)
        except (BrokenPipeError, KeyboardInterrupt):
            pass  # the startd stopped reading (it stops or reconfigures): it starts a new one
        return 0
    attrs, urgent = _attributes(_settings(), 2.0)
    os.write(1, _ad(attrs, urgent))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
