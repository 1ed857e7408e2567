"""Half-open bench: /healthz latency and pool membership while hundreds of connections never finish a request.

Two real ``htda-node`` subprocesses on loopback: a seed and a member that
heartbeats to it (interval 0.5 s, expiry 3 s).  This process holds
``--connections`` connections to the seed open, a mix of kinds (round
robin), and reopens each one the seed drops, so the pressure never lets up:

``idle``       connects and sends nothing
``line``       a partial request line
``headers``    a request whose headers arrive one byte a second and never end
``body``       a complete header block, then a small body one byte a second
``keepalive``  one complete request, then a partial second one on the same connection
``hello``      (with ``--tls``) a partial TLS handshake: five bytes of a ClientHello

With ``--tls`` the seed serves HTTPS; ``idle`` and ``hello`` stay plain TCP,
the other kinds complete their handshake first and then stall.

Meanwhile it asks ``/healthz`` on a fresh connection every 0.1 s and the
pool's member lists every 0.5 s, and prints the latency percentiles, whether
the member was ever dropped (either view, or a "left the pool" log line) and
the seed's resident memory.  Only loopback addresses; it stops by itself.

    python bench/halfopen_bench.py [--connections 400] [--seconds 10] [--tls] [--kinds idle,line,...]

A bench process that cannot open a connection (refused, or no TLS handshake
within a second) retries it later; "held" counts those actually open.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from htda.node.client import Client, ClientError  # noqa: E402
from testkit.nodes import NodeProcess, free_port, write_config  # noqa: E402
from testkit.processes import proc_sample  # noqa: E402

KINDS = ("idle", "line", "headers", "body", "keepalive")
_HELLO_START = bytes([0x16, 0x03, 0x01, 0x02, 0x00])  # a TLS record header announcing a 512-byte ClientHello


@dataclass(eq=False)
class _Attacker:
    kind: str
    sock: socket.socket
    trickle: bytes = b""  # what is still to be sent, a byte at a time


def _opening(kind: str, host: str) -> tuple[bytes, bytes]:
    """What a connection of ``kind`` sends at once, and what it trickles afterwards."""
    request = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n"
    if kind == "line":
        return b"GET /healthz HTT", b""
    if kind == "headers":
        return request.encode(), b"X-Slow: " + b"a" * 100_000
    if kind == "body":
        head = f"POST /api/v1/pool/heartbeat HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000\r\n\r\n"
        return head.encode(), b"{" * 1000
    if kind == "keepalive":
        return (request + "\r\n").encode() + request.encode(), b""
    if kind == "hello":
        return _HELLO_START, b""
    return b"", b""


@dataclass
class HalfOpen:
    """Holds ``count`` never-finishing connections to ``host:port``, reopening those the server drops.

    With ``tls`` (a client context), every kind but ``idle`` and ``hello``
    completes a TLS handshake before it stalls.
    """

    host: str
    port: int
    count: int
    kinds: tuple[str, ...] = KINDS
    tls: ssl.SSLContext | None = None
    reopened: int = 0
    open_samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> HalfOpen:
        self._selector = selectors.DefaultSelector()
        self._missing: list[str] = [self.kinds[i % len(self.kinds)] for i in range(self.count)]
        self._thread = threading.Thread(target=self._run, name="half-open", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()

    @property
    def held(self) -> int:
        return len(self._selector.get_map())

    def _open(self, kind: str) -> bool:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=1)
            if self.tls is not None and kind not in ("idle", "hello"):
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
            first, trickle = _opening(kind, f"{self.host}:{self.port}")
            sock.sendall(first)
        except OSError:
            return False  # refused, or no handshake in time: try again later
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ, _Attacker(kind, sock, trickle))
        return True

    def _run(self) -> None:
        next_trickle = time.monotonic()
        while not self._stop.is_set():
            self._open_missing(deadline=time.monotonic() + 0.5)
            for key, _ in self._selector.select(timeout=0.2):
                self._readable(key.data)
            if time.monotonic() >= next_trickle:
                next_trickle += 1.0
                self._trickle()
                self.open_samples.append(self.held)

    def _open_missing(self, deadline: float) -> None:
        while self._missing and time.monotonic() < deadline and not self._stop.is_set():
            kind = self._missing.pop()
            if not self._open(kind):
                self._missing.insert(0, kind)

    def _readable(self, attacker: _Attacker) -> None:
        try:
            data = attacker.sock.recv(65536)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            data = b""
        if data:
            return  # e.g. the answer to a keep-alive connection's first request: keep holding it
        self._selector.unregister(attacker.sock)
        attacker.sock.close()
        self.reopened += 1
        self._missing.append(attacker.kind)

    def _trickle(self) -> None:
        for key in list(self._selector.get_map().values()):
            attacker: _Attacker = key.data
            if attacker.trickle:
                try:
                    attacker.sock.send(attacker.trickle[:1])
                    attacker.trickle = attacker.trickle[1:]
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
                except OSError:
                    pass  # closed by the server: its read side notices


@dataclass
class Watch:
    """What the bench saw while the connections were held."""

    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    member_missing: int = 0
    views: int = 0
    rss: list[int] = field(default_factory=list)


def probe_healthz(url: str, ca_file: str | None, timeout: float = 2.0) -> float | None:
    """Seconds for one /healthz on a fresh connection, or None if it failed."""
    client = Client(None, retries=0, timeout=timeout, connect_timeout=timeout, ca_file=ca_file)
    started = time.perf_counter()
    try:
        ok = client.get(url + "/healthz").get("status") == "ok"
    except ClientError:
        ok = False
    finally:
        client.close()
    return time.perf_counter() - started if ok else None


def watch(seed: NodeProcess, member: NodeProcess, seconds: float, ca_file: str | None) -> Watch:
    """Probe /healthz every 0.1 s and both member lists every 0.5 s for ``seconds``."""
    seen = Watch()
    deadline = time.monotonic() + seconds
    next_view = time.monotonic()
    while time.monotonic() < deadline:
        latency = probe_healthz(seed.url, ca_file)
        if latency is None:
            seen.failures += 1
        else:
            seen.latencies.append(latency)
        if time.monotonic() >= next_view:
            next_view += 0.5
            seen.views += 1
            seen.member_missing += not _both_see_each_other(seed, member)
            sample = proc_sample(seed.proc.pid)
            seen.rss.append(sample.rss if sample else 0)
        time.sleep(0.1)
    return seen


def _both_see_each_other(seed: NodeProcess, member: NodeProcess) -> bool:
    """False only when a view that answered lacks the other node (an unanswered query is a probe failure)."""
    try:
        return {seed.name, member.name} <= member.members() and {seed.name, member.name} <= seed.members()
    except ClientError:
        return True


def dropped(seed: NodeProcess) -> str:
    """The seed's own count of connections it dropped before a complete request (n/a on nodes without it)."""
    try:
        text = seed.client.text(seed.url + "/metrics")
    except ClientError as exc:
        return f"n/a ({exc})"
    line = next((x for x in text.splitlines() if x.startswith("htda_http_connections_dropped ")), "")
    return line.split()[1] if line else "n/a"


def left_lines(*nodes: NodeProcess) -> int:
    return sum(n.log.read_text(errors="replace").count("left the pool") for n in nodes if n.log.exists())


def start_pair(directory: Path, tls: bool) -> tuple[NodeProcess, NodeProcess, str | None]:
    """A seed and a member heartbeating to it, over HTTPS with generated certificates if ``tls``."""
    scheme, ca_file, sections = "http", None, {}
    if tls:
        from testkit.certs import make_ca, make_cert

        ca = make_ca(directory)
        for name in ("seed", "member"):
            make_cert(directory, name, ca)
        scheme, ca_file = "https", str(directory / "ca.pem")
    nodes = []
    seeds: list[str] = []
    for name in ("seed", "member"):
        port = free_port()
        if tls:
            sections = {"tls": {"enabled": True, "certificate": f"{name}.pem", "private_key": f"{name}.key",
                                "ca_file": "ca.pem"}}
        seeds = seeds or [f"{scheme}://127.0.0.1:{port}"]
        config = write_config(directory, name, ["locator"], port, seeds, sections=sections, interval=0.5,
                              expiry=3.0, scheme=scheme)
        nodes.append(NodeProcess(config).start())
    return nodes[0], nodes[1], ca_file


def run(connections: int, seconds: float, tls: bool, kinds: tuple[str, ...]) -> dict:
    """Start the pair, hold the connections for ``seconds`` while watching; return the figures."""
    with tempfile.TemporaryDirectory() as tmp:
        seed, member, ca_file = start_pair(Path(tmp), tls)
        try:
            time.sleep(1.5)  # the member joins
            rss_before = proc_sample(seed.proc.pid).rss
            port = int(seed.url.rsplit(":", 1)[1])
            client_tls = ssl.create_default_context(cafile=ca_file) if ca_file else None
            with HalfOpen("127.0.0.1", port, connections, kinds, client_tls) as attack:
                seen = watch(seed, member, seconds, ca_file)
            return {**figures(seen, attack, rss_before, left_lines(seed, member)), "dropped": dropped(seed)}
        finally:
            member.stop()
            seed.stop()


def figures(seen: Watch, attack: HalfOpen, rss_before: int, left: int) -> dict:
    lat = sorted(seen.latencies) or [float("nan")]
    return {
        "held_mean": statistics.fmean(attack.open_samples) if attack.open_samples else 0.0,
        "held_min": min(attack.open_samples, default=0), "reopened": attack.reopened,
        "probes": len(seen.latencies) + seen.failures, "failures": seen.failures,
        "p50": lat[len(lat) // 2], "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))], "max": lat[-1],
        "member_dropped": bool(seen.member_missing or left), "missing_views": seen.member_missing,
        "views": seen.views, "left_lines": left,
        "rss_before_mb": rss_before / 2**20, "rss_max_mb": max(seen.rss, default=0) / 2**20,
    }


def report(fig: dict, args: argparse.Namespace, kinds: tuple[str, ...]) -> str:
    ms = lambda s: f"{s * 1000:.1f} ms"  # noqa: E731
    return "\n".join([
        f"half-open bench: {args.connections} connections ({', '.join(kinds)}) held for {args.seconds:g} s "
        f"against a seed htda-node on 127.0.0.1 (TLS: {'yes' if args.tls else 'no'})",
        f"  connections held: mean {fig['held_mean']:.0f}, min {fig['held_min']}; "
        f"reopened after the seed dropped them: {fig['reopened']} (seed's count: {fig['dropped']})",
        f"  /healthz on a fresh connection: {fig['probes']} probes, p50 {ms(fig['p50'])}, p99 {ms(fig['p99'])}, "
        f"max {ms(fig['max'])}, failed (no answer in 2 s) {fig['failures']}",
        f"  pool member dropped: {'YES' if fig['member_dropped'] else 'no'} (views lacking the other node: "
        f"{fig['missing_views']} of {fig['views']}; 'left the pool' log lines: {fig['left_lines']})",
        f"  seed RSS: {fig['rss_before_mb']:.1f} MB before, {fig['rss_max_mb']:.1f} MB max while held",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tls", action="store_true", help="serve HTTPS and add partial TLS handshakes")
    parser.add_argument("--kinds", default="", help=f"comma-separated subset of {', '.join(KINDS)}, hello")
    args = parser.parse_args()
    kinds = tuple(args.kinds.split(",")) if args.kinds else KINDS + (("hello",) if args.tls else ())
    print(report(run(args.connections, args.seconds, args.tls, kinds), args, kinds), flush=True)


if __name__ == "__main__":
    main()
