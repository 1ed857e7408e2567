"""``htda-node``: the daemon entry point (config, logging, signals, systemd readiness)."""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import socket
import sys
import threading

from .config import ConfigError
from .runtime import Node, check_host, load_config

__all__ = ["main", "return_large_blocks", "setup_logging", "sd_notify"]

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


def setup_logging(level: str, node_name: str) -> None:
    """Readable stderr logs that carry the node name, for admins grepping a site's logs."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s {node_name} %(name)s %(levelname)s: %(message)s", "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("cheroot").setLevel(logging.WARNING)


def return_large_blocks(threshold: int = 1 << 20) -> bool:
    """Serve allocations of ``threshold`` bytes or more with mappings of their own, given back when freed.

    glibc raises this threshold after the first such block is freed (up to 32 MiB) and from then on keeps
    blocks of a few MiB in the arena of the thread that used them: a node whose REST and copy threads each
    once held a copy buffer or a peer's range keeps them all resident.  False where there is no glibc mallopt.
    """
    try:
        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False


def sd_notify(message: str) -> bool:
    """Tell systemd about our state (``Type=notify``); a no-op outside systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="htda-node", description="Run an HTDA node.")
    parser.add_argument("--config", "-c", required=True, help="node config file (TOML)")
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    args = parser.parse_args(argv)
    return_large_blocks()
    stopping = threading.Event()

    def _stop(signum: int, _frame: object) -> None:
        logging.getLogger("htda.node").info("received %s, shutting down", signal.Signals(signum).name)
        stopping.set()

    # Installed before start-up, so a stop request while components start still ends in a clean stop.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        config = load_config(args.config)
        check_host(config)
        if args.check:
            print(f"{args.config}: OK ({', '.join(config['node']['components'])})")
            return 0
        setup_logging(config["node"]["log_level"], config["node"]["name"] or socket.gethostname())
        node = Node(config)
        node.start()
    except ConfigError as exc:
        print(f"htda-node: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"htda-node: cannot start: {exc}", file=sys.stderr)
        return 1
    sd_notify(f"READY=1\nSTATUS=serving at {node.url}")
    while not stopping.wait(1.0):
        pass
    sd_notify("STOPPING=1")
    node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
