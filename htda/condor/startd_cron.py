"""The STARTD_CRON script: this worker's HTDA name and cache facts for its machine ad.

HTCondor runs it every ``STARTD_CRON_HTDA_PERIOD`` and reads ``Attr = value``
lines; a line ``-`` ends the ad.  The names match what the translate hook's
``HTDA_CacheAffinity`` looks for: ``HTDA_NodeName``, and ``HTDA_CacheGroups``,
the input keys of the hot input groups the cache node holds whole
(:mod:`htda.cache.groups`), which jobs routed before those copies existed
follow.  The collector sees a cron's output only at the startd's next update
(``UPDATE_INTERVAL``, 300 s by default): when that list changed within the
last ``cron_period`` seconds, the ad ends with ``- update:true`` instead, so
a new copy draws waiting jobs from the next negotiation cycle (one update per
change, not one per run).  When the local node does not answer, the script
still prints the name it expects (from the settings or the host name) with
``HTDA_Up = false``, and exits 0.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from ..protocol import paths
from .hooks import Setting, node_request, read_settings

__all__ = ["CACHE_ATTRIBUTES", "GROUPS_ATTRIBUTE", "MAX_GROUPS", "main", "machine_attributes"]

#: machine-ad attribute of each cache fact (:class:`htda.protocol.cache.CacheFacts`, whose fields a test checks
#: these against: this script imports only :mod:`htda.protocol.paths`, to start fast)
CACHE_ATTRIBUTES = {"files": "HTDA_CacheFiles", "free_bytes": "HTDA_CacheFreeBytes",
                    "capacity_bytes": "HTDA_CacheCapacityBytes"}
#: machine-ad attribute listing the input keys of the groups the cache node holds whole (a ClassAd string list)
GROUPS_ATTRIBUTE = "HTDA_CacheGroups"
#: at most this many keys are published (the coordinator names at most 64 per node)
MAX_GROUPS = 256
_KEY_CHARS = frozenset("0123456789abcdef")


def _groups(cache: dict) -> tuple[str, bool]:
    """(the comma-separated input keys the cache node reports, whether that list changed lately)."""
    keys = cache.get("groups")
    if not isinstance(keys, list):
        return "", False
    valid = [k for k in keys[:MAX_GROUPS] if isinstance(k, str) and 0 < len(k) <= 64 and set(k) <= _KEY_CHARS]
    changed = cache.get("groups_changed")
    return ",".join(valid), isinstance(changed, (int, float)) and changed > 0


def machine_attributes(settings: dict[str, Setting], timeout: float = 2.0) -> dict[str, object]:
    """The machine-ad attributes, asking this host's node (``settings['node']``); ``HTDA_CacheGroups`` is
    always there (empty when nothing is known), so a list that emptied replaces the old one."""
    return _attributes(settings, timeout)[0]


def _attributes(settings: dict[str, Setting], timeout: float) -> tuple[dict[str, object], bool]:
    """(the machine-ad attributes, whether the ad should reach the collector at once)."""
    deadline = time.monotonic() + timeout
    node = str(settings["node"])
    attrs: dict[str, object] = {"HTDA_NodeName": socket.gethostname().split(".", 1)[0], "HTDA_Up": False,
                                GROUPS_ATTRIBUTE: ""}
    urgent = False
    try:
        status, body = node_request(node, paths.NODE, deadline)
        if status != 200:
            return attrs, urgent
        me = json.loads(body)
        attrs.update(HTDA_NodeName=str(me["name"]), HTDA_Up=True)
        status, body = node_request(node, paths.POOL, deadline)
        members = json.loads(body).get("members", []) if status == 200 else []
        cache = next((m.get("info", {}).get("cache") for m in members if m.get("name") == me["name"]), None)
        if isinstance(cache, dict):
            for key, attr in CACHE_ATTRIBUTES.items():
                if isinstance(cache.get(key), int):
                    attrs[attr] = cache[key]
            attrs[GROUPS_ATTRIBUTE], stamped = _groups(cache)
            # the node's clock and this host's are one: the cache node runs here
            urgent = stamped and time.time() - float(cache["groups_changed"]) < float(settings["cron_period"])
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


def main() -> int:
    """Print the attributes and the end-of-ad line; always exit 0."""
    settings, problem = read_settings()
    if problem:
        os.write(2, f"htda_startd_cron: {problem}\n".encode())
    attrs, urgent = _attributes(settings, 2.0)
    lines = [f"{name} = {_literal(value)}" for name, value in attrs.items()]
    os.write(1, ("\n".join(lines) + ("\n- update:true\n" if urgent else "\n-\n")).encode())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
