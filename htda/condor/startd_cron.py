"""The STARTD_CRON script: this worker's HTDA name and cache facts for its machine ad.

HTCondor runs it every ``STARTD_CRON_HTDA_PERIOD`` and reads ``Attr = value``
lines; a line ``-`` ends the ad.  The names match what the translate hook's
``HTDA_CacheAffinity`` looks for (``HTDA_NodeName``).  When the local node does
not answer, the script still prints the name it expects (from the settings
or the host name) with ``HTDA_Up = false``, and exits 0.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from ..protocol import paths
from .hooks import Setting, node_request, read_settings

__all__ = ["CACHE_ATTRIBUTES", "main", "machine_attributes"]

#: machine-ad attribute of each cache fact (:class:`htda.protocol.cache.CacheFacts`, whose fields a test checks
#: these against: this script imports only :mod:`htda.protocol.paths`, to start fast)
CACHE_ATTRIBUTES = {"files": "HTDA_CacheFiles", "free_bytes": "HTDA_CacheFreeBytes",
                    "capacity_bytes": "HTDA_CacheCapacityBytes"}


def machine_attributes(settings: dict[str, Setting], timeout: float = 2.0) -> dict[str, object]:
    """The machine-ad attributes, asking this host's node (``settings['node']``)."""
    deadline = time.monotonic() + timeout
    node = str(settings["node"])
    attrs: dict[str, object] = {"HTDA_NodeName": socket.gethostname().split(".", 1)[0], "HTDA_Up": False}
    try:
        status, body = node_request(node, paths.NODE, deadline)
        if status != 200:
            return attrs
        me = json.loads(body)
        attrs.update(HTDA_NodeName=str(me["name"]), HTDA_Up=True)
        status, body = node_request(node, paths.POOL, deadline)
        members = json.loads(body).get("members", []) if status == 200 else []
        cache = next((m.get("info", {}).get("cache") for m in members if m.get("name") == me["name"]), None)
        if isinstance(cache, dict):
            for key, attr in CACHE_ATTRIBUTES.items():
                if isinstance(cache.get(key), int):
                    attrs[attr] = cache[key]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # the node is down or odd: publish what is known, never fail
    return attrs


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
    attrs = machine_attributes(settings)
    lines = [f"{name} = {_literal(value)}" for name, value in attrs.items()]
    os.write(1, ("\n".join(lines) + "\n-\n").encode())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
