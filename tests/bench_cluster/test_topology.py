"""The namespaces, links and shaping of the cluster, built for real and removed again."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from bench.cluster import topology
from bench.cluster.topology import Topology, TopologyError
from testkit.nodes import wait_until

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and iproute2")


def test_names_fit_interface_limits():
    topo = Topology(prefix="abcdefg", workers=12)
    assert all(len(topo.port_name(h)) <= 15 for h in topo.hosts.values())
    assert [h.name for h in topo.worker_hosts] == [f"w{i}" for i in range(1, 13)]
    assert len({h.address for h in topo.hosts.values()}) == 14


@pytest.mark.parametrize("prefix", ["", "has-dash", "waytoolongprefix"])
def test_bad_prefix_is_refused(prefix):
    with pytest.raises(ValueError, match="prefix"):
        Topology(prefix=prefix)


def test_refuses_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TopologyError, match="needs root"):
        topology.check_can_run()


@needs_root
def test_tiny_cluster_links_shaping_and_teardown():
    prefix = f"t{os.getpid() % 100000}"
    with Topology(prefix=prefix, workers=1, storage_rate="100mbit", host_rate="1gbit") as topo:
        assert set(topology.namespaces(prefix)) == {f"{prefix}-{n}" for n in ("sw", "storage", "service", "w1")}
        assert "rate 100Mbit" in topo.shaping(topo.storage)
        assert "rate 1Gbit" in topo.shaping(topo.service) and "rate 1Gbit" in topo.shaping(topo.worker_hosts[0])
        server = subprocess.Popen(topo.storage.cmd("python3", "-c", (
            "import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(({topo.storage.address!r}, 4000)); s.listen(); c, _ = s.accept(); c.sendall(b'x' * 200000)")))
        try:
            before = topo.link_bytes(topo.storage)["tx"]
            worker = topo.worker_hosts[0]
            code = (f"import socket, time\nfor _ in range(50):\n    try:\n        c = socket.create_connection("
                    f"({topo.storage.address!r}, 4000), timeout=3); break\n    except OSError: time.sleep(0.1)\n"
                    "n = 0\nwhile (b := c.recv(65536)): n += len(b)\nprint(n)")
            got = subprocess.run(worker.cmd("python3", "-c", code), capture_output=True, text=True, timeout=30)
            assert got.stdout.strip() == "200000"
            assert topo.link_bytes(topo.storage)["tx"] - before >= 200000
        finally:
            server.kill()
            server.wait()
    assert topology.namespaces(prefix) == []


@needs_root
def test_hosts_unshaped_on_request():
    prefix = f"u{os.getpid() % 100000}"
    with Topology(prefix=prefix, workers=1, host_rate="") as topo:
        assert "tbf" in topo.shaping(topo.storage)
        assert topo.shaping(topo.service) == topo.shaping(topo.worker_hosts[0]) == "unshaped" or \
            "tbf" not in topo.shaping(topo.service) + topo.shaping(topo.worker_hosts[0])


@needs_root
def test_cleanup_removes_leftovers_of_a_crashed_run():
    prefix = f"c{os.getpid() % 100000}"
    topo = Topology(prefix=prefix, workers=1)
    topo.up()
    sleeper = subprocess.Popen(topo.worker_hosts[0].cmd("sleep", "600"))
    # a leftover is in its namespace before the crash's cleanup looks: nsenter joins it, then becomes the sleep
    netns = topology.namespaces(prefix)
    wait_until(lambda: any(str(sleeper.pid) in topology.run("ip", "netns", "pids", n, check=False).stdout.split()
                           for n in netns), timeout=10, what="the sleeper inside its namespace")
    removed = topology.cleanup(prefix)
    assert len(removed) == 4 and topology.namespaces(prefix) == []
    assert sleeper.wait(timeout=10) != 0
