"""``htda-node``: the daemon entry point (config, logging, signals, systemd readiness)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading

from .config import ConfigError
from .runtime import Node, check_host, load_config

__all__ = ["main", "setup_logging", "sd_notify"]


def setup_logging(level: str, node_name: str) -> None:
    """Readable stderr logs that carry the node name, for admins grepping a site's logs."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s {node_name} %(name)s %(levelname)s: %(message)s", "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("cheroot").setLevel(logging.WARNING)


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
