"""The attributes HTDA adds to a worker's machine ad (the startd cron publishes them; the job-router hooks'
expressions and the job's own ad read them): named once here for both sides."""

from __future__ import annotations

__all__ = ["CACHE_ATTRIBUTES", "GROUPS_ATTRIBUTE", "NODE_ATTR", "UP_ATTR"]

#: the name of the worker's HTDA node (the startd cron's; the host name before its node answers)
NODE_ATTR = "HTDA_NodeName"
#: whether the worker's HTDA node answered the startd cron
UP_ATTR = "HTDA_Up"
#: the cache node's facts, by the field of :class:`htda.protocol.cache.CacheFacts` they come from (written out,
#: not derived from it: the startd cron imports little, to start fast; a test checks these against its fields)
CACHE_ATTRIBUTES = {"files": "HTDA_CacheFiles", "free_bytes": "HTDA_CacheFreeBytes",
                    "capacity_bytes": "HTDA_CacheCapacityBytes"}
#: the input keys of the groups the cache node holds whole (a ClassAd string list)
GROUPS_ATTRIBUTE = "HTDA_CacheGroups"
