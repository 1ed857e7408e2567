"""The worker's read-through cache: an XRootD proxy file cache (pfc, the engine of XCache) on loopback.

HTDA does not write a file system to keep what jobs read from storage on the
worker's disk; one small pfc instance per worker does it (docs/cache.rst,
*Read-through storage on each worker*).  :class:`ReadThroughProxy` renders
its configuration, the one the docs show, the tests start and the cluster
benchmark runs; ``htda readthrough-config`` prints it for a site.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ..units import parse_bytes

__all__ = ["ReadThroughProxy", "PURGE_INTERVAL", "add_parser"]

#: seconds between two purges of a capped proxy: the least pfc accepts (its default is 300)
PURGE_INTERVAL = 60


@dataclass(frozen=True)
class ReadThroughProxy:
    """An XRootD proxy file cache in front of ``origin`` (host:port), its blocks under ``root``.

    Its own files are capped (``files`` bytes; pfc's baseline, nominal and max: a half, three quarters and all
    of it) where it shares a disk with the cache device; ``disk`` (``"low high"`` shares) sets the whole
    disk's watermarks instead, where it has a disk of its own; without either it uses pfc's default
    watermarks."""

    origin: str
    root: str
    port: int = 1095
    ram: str = "1g"
    files: int = 0
    disk: str = ""
    #: where xrootd keeps its admin socket and pid file (None: its defaults)
    adminpath: str | None = None

    def __post_init__(self) -> None:
        words = {"origin": self.origin, "root": self.root, "ram": self.ram, "adminpath": self.adminpath or "-"}
        for name, value in words.items():  # one word each: a space or a newline would start another directive
            if not value or value.split() != [value]:
                raise ValueError(f"{name} {value!r} must be one word, without spaces")
        try:
            shares = [float(x) for x in self.disk.split()]
        except ValueError:
            shares = []
        if self.disk and not (len(shares) == 2 and 0 < shares[0] <= shares[1] <= 1):
            raise ValueError(f"disk {self.disk!r} must be two shares of the disk, low and high (e.g. '0.90 0.95')")
        for wrong, message in ((":" not in self.origin, f"origin {self.origin!r} must be host:port"),
                               (not self.root.startswith("/"), f"root {self.root!r} must be an absolute path"),
                               (not 0 < self.port < 65536, f"port {self.port} is not a TCP port"),
                               (self.files < 0, "files must be >= 0 bytes"),
                               (bool(self.files and self.disk), "give files or disk, not both")):
            if wrong:
                raise ValueError(message)

    def diskusage(self) -> str:
        """pfc.diskusage: the disk's watermarks, and with ``files`` the cap on the proxy's own files (in MiB:
        pfc reads a plain number as a share of the disk, so sizes need a unit)."""
        if self.disk:
            return f"{self.disk} purgeinterval {PURGE_INTERVAL}"
        if not self.files:
            return "0.90 0.95"
        mb = max(4, self.files >> 20)
        return f"0.90 0.95 files {mb // 2}m {3 * mb // 4}m {mb}m purgeinterval {PURGE_INTERVAL}"

    def render(self) -> str:
        """The xrootd configuration (``xrootd -R xrootd -c FILE``)."""
        lines = ["all.export /", f"xrd.port {self.port}", "ofs.osslib libXrdPss.so", "pss.cachelib libXrdPfc.so",
                 f"pss.origin {self.origin}", f"oss.localroot {self.root}", "pfc.blocksize 1M",
                 f"pfc.ram {self.ram}", f"pfc.diskusage {self.diskusage()}"]
        if self.adminpath:
            lines += [f"all.adminpath {self.adminpath}", f"all.pidpath {self.adminpath}"]
        return "\n".join(lines) + "\n"


def _bytes(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_readthrough_config(args: argparse.Namespace) -> Any:
    return ReadThroughProxy(origin=args.origin, root=args.root, port=args.port, ram=args.ram,
                            files=args.files).render().rstrip("\n")


def add_parser(subparsers) -> None:
    """Register ``htda readthrough-config``."""
    p = subparsers.add_parser("readthrough-config", help="print the xrootd configuration of a worker's "
                                                         "read-through proxy (docs/cache.rst)")
    p.add_argument("--origin", required=True, help="the shared storage's XRootD server, host:port")
    p.add_argument("--root", default="/srv/htda/readthrough", help="where the proxy keeps its blocks "
                                                                    "(default %(default)s)")
    p.add_argument("--port", type=int, default=1095, help="its port on loopback (default %(default)s)")
    p.add_argument("--ram", default="1g", help="its memory for blocks in flight (default %(default)s)")
    p.add_argument("--files", type=_bytes, default=0,
                   help="cap on its own files where it shares the disk with the cache device (e.g. 50GiB)")
    p.set_defaults(func=cmd_readthrough_config)
