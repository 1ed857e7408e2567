"""``htda``: the admin command line, a thin layer over the REST API.

Every command talks to one node (``--url``) and finds the pool's
coordinator, locator and cache nodes through that node's member list.
Output is a human table by default and JSON with ``--json``.  Exit codes:
0 success, 1 a node could not be reached (or failed), 2 the request was
refused (4xx: bad input, missing signature, not supported by this pool).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .lfn import normalize_lfn
from .node.auth import AuthError, load_secret, new_secret
from .node.client import Client, ClientError, HTTPStatusError
from .protocol import cache, coordinator, locator, node, paths
from .protocol.base import to_wire
from .protocol.clients import CacheClient, CoordinatorClient, LocatorClient, NodeClient
from .protocol.node import member_facts

__all__ = ["main", "CLIError", "human_size"]

DEFAULT_URL = os.environ.get("HTDA_URL", "http://127.0.0.1:8740")


class CLIError(Exception):
    """A failure to report in one line, with the process exit code."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def _client(args: argparse.Namespace) -> Client:
    secret = _secret(args.secret_file) if args.secret_file else None
    return Client(secret, timeout=args.timeout, ca_file=args.ca_file or None)


def _secret(path: str) -> bytes:
    try:
        return load_secret(path)
    except FileNotFoundError:
        raise CLIError(f"pool secret file {path} does not exist (--secret-file or $HTDA_SECRET_FILE)") from None
    except PermissionError:
        raise CLIError(f"pool secret file {path} is not readable by this user (run as its owner, or root)") from None
    except AuthError as exc:
        raise CLIError(str(exc)) from None


# -- formatting ----------------------------------------------------------------------
def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """Rows as aligned columns: times as UTC, byte counts in binary units (headed without ``_BYTES``)."""
    cells = [[_formatted(c, row.get(c, "")) for c in columns] for row in rows]
    headers = [c.removesuffix("_bytes") for c in columns]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def _formatted(column: str, value: Any) -> str:
    if _is_time(column):
        return _time(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return _cell(value)
    if _is_size(column):
        return human_size(value)
    if column == "fraction" or column.endswith("_fraction"):
        return f"{value:.0%}"
    if column in ("age", "uptime"):
        return _duration(value)
    return _cell(value)


def _is_size(column: str) -> bool:
    return column in ("size", "bytes") or column.endswith("_bytes")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e5 else f"{value:.4g}"  # never 1.795e+09 in a table
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return "" if value is None else str(value)


def _is_time(column: str) -> bool:
    return (column in ("time", "started", "submitted", "last_access", "last_seen", "expires", "since", "mtime")
            or column.endswith(("_time", "_at")))


def _time(value: Any) -> str:
    """Unix seconds as UTC, the way admins read logs."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return _cell(value)
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _columns(rows: list[dict[str, Any]], preferred: tuple[str, ...] = ()) -> list[str]:
    """The preferred columns that occur, then every other key in order of appearance."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return [c for c in preferred if c in seen] + [c for c in seen if c not in preferred]


def _duration(seconds: float) -> str:
    """Seconds the way people say them: ``0.4 s``, ``42 s``, ``3 min 20 s``, ``5 h 02 min``, ``3 d 4 h``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def human_size(value: Any) -> str:
    """A byte count in binary units (``31.0 KiB``, ``63.8 GiB``); ``-`` for no number."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)


def _document(answer: Any, preferred: tuple[str, ...] = ()) -> str:
    """A JSON object as ``key: value`` lines, with its lists of objects as tables."""
    if not isinstance(answer, dict):
        return json.dumps(answer, indent=2, sort_keys=True)
    lines, tables = [], []
    for key, value in answer.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            tables.append(f"{key} ({len(value)}):\n" + _table(value, _columns(value, preferred)))
        else:
            lines.append(f"{key}: {'(none)' if value is None else _formatted(key, value)}")
    return "\n".join(lines + tables)


# -- talking to the pool ---------------------------------------------------------------
def _pool(args: argparse.Namespace) -> dict[str, Any]:
    return NodeClient(_client(args), args.url).fetch(node.POOL)


def _members(args: argparse.Namespace, role: str | None = None) -> list[dict[str, Any]]:
    """Pool members (the contacted node first), optionally those with ``role``."""
    pool = _pool(args)
    members = sorted(pool["members"], key=lambda m: (m["name"] != pool.get("self"), m["name"]))
    return [m for m in members if role is None or role in m["roles"]]


def _role_url(args: argparse.Namespace, role: str) -> str:
    found = _members(args, role)
    if not found:
        raise CLIError(f"no {role} in the pool seen by {args.url}", 1)
    return found[0]["url"].rstrip("/")


def _member_url(args: argparse.Namespace, name: str, role: str) -> str:
    for member in _members(args):
        if member["name"] == name:
            if role not in member["roles"]:
                raise CLIError(f"node {name} does not run the {role} role (roles: {','.join(member['roles'])})")
            return member["url"].rstrip("/")
    raise CLIError(f"no node named {name!r} in the pool seen by {args.url}")


def _feature(what: str, call: Callable[[], Any]) -> Any:
    """Run ``call``; an endpoint the server does not have becomes a clear 'not supported' error."""
    try:
        return call()
    except HTTPStatusError as exc:
        missing = exc.status == 404 and str(exc).startswith("HTTP 404: no such endpoint")
        if missing or exc.status == 405:
            raise CLIError(f"this pool does not support {what} yet ({exc.url} answers {exc.status})") from None
        raise


def _lfn(value: str) -> str:
    try:
        return normalize_lfn(value)
    except ValueError as exc:
        raise CLIError(f"{value!r}: {exc}") from None


# -- commands ------------------------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> Any:
    client = _client(args)
    me = NodeClient(client, args.url).fetch(node.NODE)
    pool = NodeClient(client, args.url).fetch(node.POOL)
    health = _health(client, args.url)
    if args.json:
        return {"node": me, "pool": pool, "health": health}
    rows = [{"name": m["name"], "url": m["url"], "roles": m["roles"], "version": m["version"], "age": m["age"]}
            for m in pool["members"]]
    state = "healthy" if health.get("status") == "ok" else "UNHEALTHY: " + "; ".join(health.get("problems", []))
    return (f"{me['name']} (HTDA {me['version']}, up {_duration(me['uptime'])}, roles "
            f"{','.join(me['roles'])}), {state}\n{len(rows)} pool member(s):\n"
            + _table(rows, ["name", "url", "roles", "version", "age"]))


def _health(client: Client, url: str) -> dict[str, Any]:
    """``/healthz``'s body, also when it answers 503 (a loop is stale or failing)."""
    try:
        return client.get(url.rstrip("/") + paths.HEALTHZ)
    except HTTPStatusError as exc:
        if exc.status == 503 and isinstance(exc.payload, dict):
            return exc.payload
        raise


def cmd_nodes(args: argparse.Namespace) -> Any:
    members = _members(args)
    if args.json:
        return members
    usage = cache.CacheFacts.__struct_fields__  # what a cache node says of itself in its heartbeats
    rows = []
    for m in members:
        facts = member_facts(m, "cache", cache.CacheFacts)
        rows.append({"name": m["name"], "roles": m["roles"], "age": m["age"], **(to_wire(facts) if facts else {})})
    return _table(rows, ["name", "roles", "age", *usage])


def cmd_cache(args: argparse.Namespace) -> Any:
    url = _member_url(args, args.node, "cache")
    client = CacheClient(_client(args), url)
    answer = {"node": args.node, "url": url, "devices": client.fetch(cache.DEVICES)["devices"],
              "staging": client.fetch(cache.STAGING)}
    if args.files:
        answer["files"] = client.fetch(cache.FILES, query={"limit": args.limit})
    if args.json:
        return answer
    staging = answer["staging"]
    devices = answer["devices"]
    out = [f"{args.node} at {url}", _table(devices, _columns(devices, ("path", "backend", "used_bytes",
                                                                       "free_bytes", "capacity_bytes", "files"))),
           f"staging: {len(staging.get('active', []))} active, {len(staging.get('queued', []))} queued, "
           f"{len(staging.get('failed', []))} failed recently"]
    for key, columns in STAGING_TABLES.items():
        if staging.get(key):
            out.append(f"{key}:\n" + _table(staging[key], list(columns)))
    if args.files:
        files = answer["files"]
        out.append(f"files ({files.get('total', len(files['files']))} held):")
        out.append(_table(files["files"], ["lfn", "size", "score", "staged_at", "device"]))
    return "\n".join(out)


# The staging queue's entries in `htda cache`: what a person needs (--json has every field).
STAGING_TABLES = {"active": ("lfn", "state", "size", "done_bytes", "started_at", "device"),
                  "queued": ("lfn", "size", "score", "queued_at", "device"),
                  "failed": ("lfn", "attempt", "time", "error")}


def cmd_top(args: argparse.Namespace) -> Any:
    url = _role_url(args, "coordinator")
    endpoint = coordinator.TOP_FILES if args.kind == "files" else coordinator.TOP_GROUPS
    answer = _feature(f"top {args.kind}", lambda: CoordinatorClient(_client(args), url).fetch(
        endpoint, query={"n": args.limit}))
    if args.json:
        return answer
    rows = answer.get(args.kind, []) if isinstance(answer, dict) else answer
    if not rows:
        return f"no {args.kind} rated yet"
    return _table(rows, _columns(rows, ("lfn", "name", "score", "size", "accesses", "files", "node", "nodes")))


def cmd_locate(args: argparse.Namespace) -> Any:
    lfns = [_lfn(v) for v in args.lfns]
    url = _role_url(args, "locator")
    answer = LocatorClient(_client(args), url).fetch(locator.LOOKUP, locator.LookupRequest(lfns=lfns))
    if args.json:
        return answer
    files = [{"lfn": lfn, "nodes": answer["files"].get(lfn) or "(none)"} for lfn in lfns]
    nodes = [{"node": name, **facts} for name, facts in sorted(answer.get("nodes", {}).items())]
    out = _table(files, ["lfn", "nodes"])
    if nodes:
        out += "\n\n" + _table(nodes, _columns(nodes, ("node", "files", "bytes", "fraction")))
    return out


def cmd_reads(args: argparse.Namespace) -> Any:
    url = _role_url(args, "coordinator")
    answer, plain = CoordinatorClient(_client(args), url).exchange(coordinator.READING)
    if args.json:
        return plain
    deferred = set(answer.deferred)
    rows = [{"node": node, "lfn": lfn, "copy": "waits" if lfn in deferred else "goes on"}
            for node, lfns in sorted(answer.nodes.items()) for lfn in lfns]
    if not rows:
        return "no job reads from storage now"
    return _table(rows, ["node", "lfn", "copy"]) + f"\n\n{len(deferred)} files' copies wait (max_defer " \
        f"{answer.max_defer:g} s)"


def cmd_history(args: argparse.Namespace) -> Any:
    lfn = _lfn(args.lfn)
    url = _role_url(args, "coordinator")
    answer = _feature("file histories", lambda: CoordinatorClient(_client(args), url).fetch(
        coordinator.FILE, lfn=lfn))
    return answer if args.json else _document(answer, ("time", "job_id", "state", "node", "owner"))


def cmd_drain(args: argparse.Namespace) -> Any:
    url = _role_url(args, "coordinator")
    drain = not args.undo
    client = CoordinatorClient(_client(args), url)
    answer = _feature("draining nodes", lambda: client.fetch(
        coordinator.DRAIN, coordinator.DrainRequest(draining=drain), node=args.node))
    if args.json:
        return answer
    return (f"{args.node}: draining; its files are placed elsewhere and it takes no new ones" if drain
            else f"{args.node}: no longer draining; it takes new files again")


def cmd_pin(args: argparse.Namespace) -> Any:
    lfns = [_lfn(v) for v in args.lfns]
    if not lfns and not args.groups:
        raise CLIError(f"{args.command}: name at least one LFN or --group")
    pin = args.command == "pin"
    url = _role_url(args, "coordinator")
    answer, plain = _feature("pinning", lambda: CoordinatorClient(_client(args), url).exchange(
        coordinator.PIN, coordinator.PinRequest(pin=pin, lfns=lfns, groups=args.groups)))
    return plain if args.json else _pin_text(pin, lfns, args.groups, answer)


def _pin_text(pin: bool, lfns: list[str], groups: list[str], answer: coordinator.PinAnswer) -> str:
    """What a pin or unpin did, in words: the files it touched, groups the coordinator does not know."""
    verb = "pinned" if pin else "unpinned"
    unknown = answer.unknown_groups
    what = ", ".join(lfns + [f"group {g}" for g in groups if g not in unknown])
    lines = [f"{verb}: {what}" if what else f"nothing {verb}",
             f"{answer.files} file(s) {verb}; {answer.pinned} pinned in the pool now"]
    lines += [f"no group named {g!r} is known to the coordinator: nothing done for it" for g in unknown]
    return "\n".join(lines)


def cmd_evict(args: argparse.Namespace) -> Any:
    lfns = [_lfn(v) for v in args.lfns]
    url = _member_url(args, args.node, "cache")
    answer = _feature("evicting files", lambda: CacheClient(_client(args), url).fetch(
        cache.EVICT, cache.EvictRequest(lfns=lfns)))
    if args.json:
        return answer
    rows = [{"lfn": lfn, "result": "evicted, given back to the coordinator"} for lfn in answer.get("evicted", [])]
    rows += [{"lfn": lfn, "result": "not held here"} for lfn in answer.get("not_held", [])]
    return f"{args.node}:\n" + _table(rows, ["lfn", "result"])


def cmd_get(args: argparse.Namespace) -> Any:
    path = args.path if args.path.startswith("/") else "/" + args.path  # `htda get api/v1/node` means the same
    return _client(args).get(f"{args.url.rstrip('/')}{path}")


def cmd_secret(args: argparse.Namespace) -> Any:
    try:
        fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CLIError(f"{args.file} already exists: a new secret would lock out every member that uses it; "
                       f"remove it first if that is what you want") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(new_secret() + "\n")
    if args.json:
        return {"file": os.path.abspath(args.file), "mode": "0600"}
    return f"wrote a new pool secret to {args.file} (mode 600); copy it to every pool member"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="htda", description="Administer an HTDA pool.")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"a node's URL (default {DEFAULT_URL}, or $HTDA_URL)")
    parser.add_argument("--secret-file", default=os.environ.get("HTDA_SECRET_FILE", ""),
                        help="pool secret, for signed requests (or $HTDA_SECRET_FILE)")
    parser.add_argument("--ca-file", default="", help="CA bundle for HTTPS pools")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = _WithJson(parser.add_subparsers(dest="command", required=True))
    sub.add_parser("status", help="this node and the pool's members").set_defaults(func=cmd_status)
    sub.add_parser("nodes", help="pool members and their cache usage").set_defaults(func=cmd_nodes)
    p = sub.add_parser("cache", help="one cache node: devices, staging queue, files")
    p.add_argument("node")
    p.add_argument("--files", action="store_true", help="list the copies it holds, best score first")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_cache)
    p = sub.add_parser("top", help="best-rated files or file groups")
    p.add_argument("kind", choices=["files", "groups"])
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=cmd_top)
    p = sub.add_parser("locate", help="which nodes hold these LFNs")
    p.add_argument("lfns", nargs="+", metavar="LFN")
    p.set_defaults(func=cmd_locate)
    sub.add_parser("reads", help="files jobs read from storage now, and whose copies wait for them"
                   ).set_defaults(func=cmd_reads)
    p = sub.add_parser("history", help="a file's rating and access history")
    p.add_argument("lfn", metavar="LFN")
    p.set_defaults(func=cmd_history)
    p = sub.add_parser("drain", help="re-place a cache node's files and give it no new ones (signed)")
    p.add_argument("node")
    p.add_argument("--undo", action="store_true", help="end the drain")
    p.set_defaults(func=cmd_drain)
    for name, text in (("pin", "keep files or groups cached whatever their rating"), ("unpin", "undo a pin")):
        p = sub.add_parser(name, help=f"{text} (signed)")
        p.add_argument("lfns", nargs="*", metavar="LFN")
        p.add_argument("--group", dest="groups", action="append", default=[], help="a file group (repeatable)")
        p.set_defaults(func=cmd_pin)
    p = sub.add_parser("evict", help="drop copies from a cache node (signed)")
    p.add_argument("node")
    p.add_argument("lfns", nargs="+", metavar="LFN")
    p.set_defaults(func=cmd_evict)
    p = sub.add_parser("get", help="GET any API path, print the JSON")
    p.add_argument("path", help="e.g. /api/v1/pool")
    p.set_defaults(func=cmd_get, json=True)
    p = sub.add_parser("new-secret", help="create a pool secret file")
    p.add_argument("file")
    p.set_defaults(func=cmd_secret)
    for module in _SUBCOMMAND_MODULES:
        _import(module).add_parser(sub)
    return parser


# Components add their own subcommands: each module has ``add_parser(subparsers)``
# whose parsers set ``func`` to a callable(args) returning a string or JSON-able value.
_SUBCOMMAND_MODULES: list[str] = ["htda.simulator.cli", "htda.demo", "htda.cache.readthrough"]


class _WithJson:
    """A subparsers action whose ``add_parser`` also accepts ``--json`` after the subcommand.

    SUPPRESS keeps the global ``--json`` value when the subcommand's is not given.
    """

    def __init__(self, action: Any):
        self._action = action

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser = self._action.add_parser(name, **kwargs)
        parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
        return parser


def _import(name: str):
    import importlib

    return importlib.import_module(name)


def _explain(exc: ClientError, args: argparse.Namespace) -> tuple[str, int]:
    """One line and an exit code for a failed request."""
    if isinstance(exc, HTTPStatusError) and 400 <= exc.status < 500:
        hint = ""
        if exc.status == 401 and not args.secret_file:
            hint = " (signed request: give --secret-file or set $HTDA_SECRET_FILE)"
        return f"refused: {exc}{hint}", 2
    return str(exc), 1


def _failed(args: argparse.Namespace, message: str, code: int) -> int:
    """Report a failure on stderr: one line, or under ``--json`` a JSON object scripts can parse."""
    if getattr(args, "json", False):
        print(json.dumps({"error": {"message": message, "exit_code": code}}), file=sys.stderr)
    else:
        print(f"htda: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
    except CLIError as exc:
        return _failed(args, str(exc), exc.code)
    except ClientError as exc:
        return _failed(args, *_explain(exc, args))
    except (OSError, ValueError) as exc:
        return _failed(args, str(exc), 2)
    except KeyboardInterrupt:  # (Ctrl-C in a long command: a line, not a traceback; 130 as a shell says it)
        return _failed(args, "interrupted", 130)
    try:
        print(result if isinstance(result, str) else json.dumps(result, indent=2, sort_keys=True), flush=True)
    except BrokenPipeError:  # (`htda ... | head`: the reader left; quiet, as other tools are)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush does not fail
        return 141  # 128 + SIGPIPE, as a shell reports a command a closed pipe stopped
    return 0


if __name__ == "__main__":
    sys.exit(main())
