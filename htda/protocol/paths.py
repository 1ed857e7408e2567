"""Every REST path between roles, once, as plain strings: importing this module loads nothing else.

The role modules (:mod:`.node`, :mod:`.coordinator`, :mod:`.locator`, :mod:`.cache`) pair each path with its
method and body types; the short-lived hooks and the startd cron import only this (they must start fast), and
the C hook (``hooks/native/htda_hook.c``) is built with the two submit paths from here (``hooks/install-hooks``
passes :mod:`htda.condor.hooks`' constants, which are these, as ``-D`` definitions).
``{name}`` is a path parameter, ``{name:path}`` one that may contain slashes.
"""

API = "/api/v1"

# every node
HEALTHZ = "/healthz"
METRICS = "/metrics"
NODE = f"{API}/node"
POOL = f"{API}/pool"
HEARTBEAT = f"{API}/pool/heartbeat"
OPENAPI = f"{API}/openapi.json"

# coordinator
COORDINATOR = f"{API}/coordinator"
JOBS = f"{COORDINATOR}/jobs"
EVENTS = f"{COORDINATOR}/events"
RELEASES = f"{COORDINATOR}/releases"
READS = f"{COORDINATOR}/reads"
ASSIGNMENTS = f"{COORDINATOR}/assignments/{{node}}"
TOP_FILES = f"{COORDINATOR}/files/top"
TOP_GROUPS = f"{COORDINATOR}/groups/top"
FILE = f"{COORDINATOR}/files/{{lfn:path}}"
NODES = f"{COORDINATOR}/nodes"
PINS = f"{COORDINATOR}/pins"
CYCLE = f"{COORDINATOR}/cycle"
DRAIN = f"{COORDINATOR}/nodes/{{node}}/drain"

# locator
LOCATOR = f"{API}/locator"
HOLDINGS = f"{LOCATOR}/holdings"
LOOKUP = f"{LOCATOR}/lookup"
LOCATED = f"{LOCATOR}/files/{{lfn:path}}"
HOLDERS = f"{LOCATOR}/nodes"

# cache
CACHE = f"{API}/cache"
CACHE_FILES = f"{CACHE}/files"
CACHE_DEVICES = f"{CACHE}/devices"
CACHE_STAGING = f"{CACHE}/staging"
CACHE_EVICTIONS = f"{CACHE}/evictions"
CACHE_VIEW = f"{CACHE}/view"
CACHE_COPIES = f"{CACHE}/copies/{{lfn:path}}"
CACHE_CYCLE = f"{CACHE}/cycle"
CACHE_EVICT = f"{CACHE}/evict"
CACHE_READ_AHEAD = f"{CACHE}/read-ahead"

# dashboard
DASHBOARD_PAGE = "/dashboard"
DASHBOARD_STATIC = "/dashboard/static/{name}"
DASHBOARD_SUMMARY = f"{API}/dashboard/summary"

# the submit agent's hook channel (a UNIX socket on the submit host, not the pool's network)
TRANSLATE = f"{API}/submit/translate"
SUBMIT_EVENTS = f"{API}/submit/events"  # ?hook=update|finalize|cleanup
