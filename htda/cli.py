"""``htda``: the admin command line, a thin layer over the REST API."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .node.auth import load_secret, new_secret
from .node.client import Client, ClientError

__all__ = ["main"]

DEFAULT_URL = os.environ.get("HTDA_URL", "http://127.0.0.1:8740")


def _client(args: argparse.Namespace) -> Client:
    secret = load_secret(args.secret_file) if args.secret_file else None
    return Client(secret, timeout=args.timeout, ca_file=args.ca_file or None)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> Any:
    client = _client(args)
    node = client.get(f"{args.url}/api/v1/node")
    pool = client.get(f"{args.url}/api/v1/pool")
    if args.json:
        return {"node": node, "pool": pool}
    rows = [{"name": m["name"], "url": m["url"], "roles": ",".join(m["roles"]), "version": m["version"],
             "age": f"{m['age']:.1f}s"} for m in pool["members"]]
    return (f"{node['name']} (HTDA {node['version']}, up {node['uptime']:.0f}s, roles {','.join(node['roles'])})\n"
            f"{len(rows)} pool member(s):\n" + _table(rows, ["name", "url", "roles", "version", "age"]))


def cmd_get(args: argparse.Namespace) -> Any:
    return _client(args).get(f"{args.url}{args.path}")


def cmd_secret(args: argparse.Namespace) -> Any:
    fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(new_secret() + "\n")
    return f"wrote a new pool secret to {args.file} (mode 600); copy it to every pool member"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="htda", description="Administer an HTDA pool.")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"a node's URL (default {DEFAULT_URL}, or $HTDA_URL)")
    parser.add_argument("--secret-file", default=os.environ.get("HTDA_SECRET_FILE", ""),
                        help="pool secret, for signed requests (or $HTDA_SECRET_FILE)")
    parser.add_argument("--ca-file", default="", help="CA bundle for HTTPS pools")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="this node and the pool's members").set_defaults(func=cmd_status)
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
_SUBCOMMAND_MODULES: list[str] = []


def _import(name: str):
    import importlib

    return importlib.import_module(name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
    except ClientError as exc:
        print(f"htda: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"htda: {exc}", file=sys.stderr)
        return 2
    if isinstance(result, str):
        print(result)
    else:
        print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
