"""A small cluster on one machine: network namespaces, veth pairs, one bridge, a slowed storage link.

Every host is a network namespace named ``<prefix>-<host>`` with one interface
``eth0`` on a private /24 that exists only inside these namespaces.  A switch
namespace ``<prefix>-sw`` holds the bridge and the other end of each veth pair,
so nothing is added to the machine's own network namespace.  Every link is
shaped with ``tc ... tbf`` in both directions: the storage host's to its own,
slower rate (a shared file server), every other host's (the service host,
where a central cache runs, and each worker) to one NIC's rate.
:func:`cleanup` removes everything by the name prefix, also after a crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Host", "Topology", "TopologyError", "check_can_run", "cleanup", "run", "NETNS_DIR"]

NETNS_DIR = Path("/run/netns")
MAX_PREFIX = 7  # interface names are <= 15 characters: "<prefix>-<n>s"


class TopologyError(RuntimeError):
    """The topology cannot be built here (with the reason)."""


def run(*argv: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    """Run a command; on failure raise :class:`TopologyError` with its stderr."""
    done = subprocess.run(argv, capture_output=capture, text=True)
    if check and done.returncode != 0:
        raise TopologyError(f"{' '.join(argv)}: {(done.stderr or done.stdout or '').strip()}")
    return done


def check_can_run() -> None:
    """Raise :class:`TopologyError` with a clear message where namespaces cannot be made."""
    if os.geteuid() != 0:
        raise TopologyError("the cluster benchmark needs root (network namespaces, tc, mounts): run it as root")
    for tool in ("ip", "tc", "nsenter"):
        if run("sh", "-c", f"command -v {tool}", check=False).returncode != 0:
            raise TopologyError(f"'{tool}' is missing: install iproute2 / util-linux")
    probe = f"htdaprobe{os.getpid()}"
    done = run("ip", "netns", "add", probe, check=False)
    if done.returncode != 0:
        raise TopologyError(f"network namespaces do not work here: {done.stderr.strip()}")
    run("ip", "netns", "del", probe, check=False)


@dataclass
class Host:
    """One host of the cluster: a namespace with one address."""

    name: str
    netns: str
    address: str
    index: int

    def cmd(self, *argv: str) -> list[str]:
        """``argv`` run in this host's network namespace.

        ``nsenter --net`` changes only the network namespace (unlike ``ip netns
        exec``, which also makes a private mount namespace), so FUSE mounts
        made by daemons in a host (the union view, xrootdfs) are visible to
        the jobs started in the same host later.
        """
        return ["nsenter", f"--net={NETNS_DIR / self.netns}", *argv]


@dataclass
class Topology:
    """The namespaces and links of one benchmark run; ``with Topology(...) as topo:`` builds and removes them."""

    prefix: str = "htdab"
    workers: int = 4
    subnet: str = "10.231.7"
    storage_rate: str = "200mbit"
    host_rate: str = "1gbit"  # every other host's NIC ("": unshaped)
    hosts: dict[str, Host] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.prefix.isalnum() or not 0 < len(self.prefix) <= MAX_PREFIX:
            raise ValueError(f"prefix must be 1-{MAX_PREFIX} letters or digits, not {self.prefix!r}")
        if not 1 <= self.workers <= 200:
            raise ValueError("workers must be between 1 and 200")
        names = ["storage", "service"] + [f"w{i}" for i in range(1, self.workers + 1)]
        for index, name in enumerate(names):
            self.hosts[name] = Host(name, f"{self.prefix}-{name}", f"{self.subnet}.{index + 2}", index)

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    @property
    def storage(self) -> Host:
        return self.hosts["storage"]

    @property
    def service(self) -> Host:
        return self.hosts["service"]

    @property
    def worker_hosts(self) -> list[Host]:
        return [h for n, h in self.hosts.items() if n.startswith("w")]

    def port_name(self, host: Host) -> str:
        """The switch-side end of a host's veth pair."""
        return f"{self.prefix}-{host.index}s"

    # -- life cycle ----------------------------------------------------------------
    def __enter__(self) -> "Topology":
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> None:
        """Build the namespaces, the bridge, the links and the shaping; undo everything on a failure."""
        check_can_run()
        cleanup(self.prefix)
        try:
            self._build()
        except BaseException:
            self.down()
            raise

    def _build(self) -> None:
        run("ip", "netns", "add", self.switch)
        run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", self.switch, "link", "set", "br0", "up")
        run("ip", "-n", self.switch, "link", "set", "lo", "up")
        for host in self.hosts.values():
            port = self.port_name(host)
            run("ip", "netns", "add", host.netns)
            run("ip", "link", "add", "eth0", "netns", host.netns, "type", "veth",
                "peer", "name", port, "netns", self.switch)
            run("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
            run("ip", "-n", host.netns, "link", "set", "lo", "up")
            run("ip", "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            run("ip", "-n", host.netns, "link", "set", "eth0", "up")
        self._shape(self.storage, self.storage_rate)
        for host in [self.service, *self.worker_hosts]:
            self._shape(host, self.host_rate)

    def _shape(self, host: Host, rate: str) -> None:
        """Limit both directions of a host's link: its eth0 (sending) and its switch port (receiving)."""
        if not rate:
            return
        tbf = ["tbf", "rate", rate, "burst", "256kb", "latency", "50ms"]
        run("tc", "-n", host.netns, "qdisc", "add", "dev", "eth0", "root", *tbf)
        run("tc", "-n", self.switch, "qdisc", "add", "dev", self.port_name(host), "root", *tbf)

    def down(self) -> None:
        cleanup(self.prefix)

    # -- observation -----------------------------------------------------------------
    def link_bytes(self, host: Host) -> dict[str, int]:
        """Bytes the host sent and received on its link so far (veth counters)."""
        done = run("ip", "-n", host.netns, "-s", "-j", "link", "show", "dev", "eth0")
        stats = json.loads(done.stdout)[0]["stats64"]
        return {"tx": int(stats["tx"]["bytes"]), "rx": int(stats["rx"]["bytes"])}

    def shaping(self, host: Host) -> str:
        """The qdisc line of the host's link (for the report)."""
        return run("tc", "-n", host.netns, "qdisc", "show", "dev", "eth0").stdout.strip() or "unshaped"


def namespaces(prefix: str) -> list[str]:
    """Names of existing namespaces that belong to runs with this prefix."""
    done = run("ip", "netns", "list", check=False)
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(f"{prefix}-")]


def cleanup(prefix: str) -> list[str]:
    """Kill every process left in the prefix's namespaces and delete them; return their names."""
    if not prefix.isalnum():
        raise ValueError(f"bad prefix {prefix!r}")
    found = namespaces(prefix)
    for netns in found:
        for pid in run("ip", "netns", "pids", netns, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for netns in found:
        run("ip", "netns", "del", netns, check=False)
    return found
