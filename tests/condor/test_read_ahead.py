"""Read-ahead end to end (docs/cache.rst, Read-through storage on each worker): the translate hook routes a job
whose inputs no node holds to its first-read home, the submit agent asks that real cache node to read the
inputs ahead, and the node reads them through its storage at once; a node with ``read_ahead`` off refuses
and is left alone."""

from __future__ import annotations

import logging
import time

from htda.condor.readahead import ReadAheadAsker
from htda.node.client import Client
from htda.node.metrics import Registry
from htda.node.rest import HTTPError
from htda.protocol import cache
from testkit.clock import FakeClock
from testkit.fakes import StandIn
from testkit.http import raw as raw_request
from testkit.nodes import SECRET, wait_until
from testkit.storage import make_tree

from .kit import agent_sections, agent_socket, hook_input, job_ad, parse, run_hook, write_hook_config

NEW = {"/store/ahead/a.root": 300_000, "/store/ahead/b.root": 120_000}
DEVICE = {"path": "cache0", "capacity": 64 << 20, "high_watermark": 1.0, "low_watermark": 1.0}


def metric(url: str, line: str) -> bool:
    _, body = raw_request("GET", f"{url}/metrics")
    return line.encode() in body.splitlines()


def homing_pool(inprocess_node, locator, coordinator, sockets, tmp_path, read_ahead: bool):
    """The agent with first-read homes, one cache node (``read_ahead`` as given) over a POSIX storage holding
    the new files, and a hook settings file for the agent."""
    agent = inprocess_node("homing", ["submit"], seeds=[locator.url], sections=agent_sections(
        [locator.url], [coordinator.url], sockets(), steer_requirements=True, first_read_home=True))
    make_tree(tmp_path / "storage", NEW)
    node = inprocess_node("c-home", ["cache"], seeds=[agent.url], sections={"cache": {
        "devices": [DEVICE], "cycle": 60.0, "storage_location": str(tmp_path / "storage"), "read_ahead": read_ahead}})
    wait_until(lambda: [m.name for m in agent.members("cache")] == ["c-home"], what="the cache node")
    return agent, node, write_hook_config(tmp_path / "homing.toml", agent_socket(agent))


def route(config, inputs: str, proc: int = 0):
    ad = job_ad(HTDA_InputFiles=f'"{inputs}"', QDate=str(int(time.time())), ProcId=str(proc))
    return parse(run_hook("htda_translate", hook_input(ad), config).stdout)


def test_the_home_reads_a_routed_jobs_inputs_ahead_once(inprocess_node, locator, coordinator, sockets, tmp_path):
    agent, node, config = homing_pool(inprocess_node, locator, coordinator, sockets, tmp_path, read_ahead=True)
    job = route(config, "/storage/store/ahead/a.root, /storage/store/ahead/b.root")
    assert job["HTDA_HomeNode"] == "c-home"
    wait_until(lambda: metric(node.url, "htda_cache_read_ahead_bytes_total 420000"), timeout=20,
               what="the home to read both inputs ahead")
    assert metric(node.url, 'htda_cache_read_ahead_files_total{outcome="read"} 2')
    assert metric(agent.url, 'htda_submit_read_ahead_total{outcome="asked"} 2')
    route(config, "/storage/store/ahead/b.root", proc=1)  # the same input again: read a moment ago
    wait_until(lambda: metric(node.url, 'htda_cache_read_ahead_files_total{outcome="skipped"} 1'), timeout=20,
               what="the second ask to be skipped")
    assert metric(node.url, "htda_cache_read_ahead_bytes_total 420000")


def test_a_home_without_read_ahead_refuses(inprocess_node, locator, coordinator, sockets,
                                                                  tmp_path):
    agent, node, config = homing_pool(inprocess_node, locator, coordinator, sockets, tmp_path, read_ahead=False)
    assert route(config, "/storage/store/ahead/a.root")["HTDA_HomeNode"] == "c-home"
    wait_until(lambda: metric(agent.url, 'htda_submit_read_ahead_total{outcome="refused"} 1'), timeout=20,
               what="the refusal")
    assert route(config, "/storage/store/ahead/b.root", proc=1)["HTDA_HomeNode"] == "c-home"  # still homed
    assert not metric(node.url, 'htda_cache_read_ahead_files_total{outcome="read"} 1')
    status, _ = raw_request("POST", f"{node.url}/api/v1/cache/read-ahead", b'{"jobs": [["/store/ahead/a.root"]]}')
    assert status == 401  # unsigned: refused before anything else


# -- the agent's side alone, on an injected clock --------------------------------------------------------------


class CacheStandIn(StandIn):
    """A cache node's read-ahead route answering ``status`` (200: queued all), recording the LFNs asked."""

    def __init__(self, status: int = 200):
        self.asked: list[list[str]] = []
        self.status = status
        super().__init__({cache.READ_AHEAD: self._ask})

    def _ask(self, request):
        self.asked.append([list(job) for job in request.data.jobs])
        if self.status != 200:
            raise HTTPError(self.status, "read_ahead is off on this node")
        return {"queued": sum(map(len, request.data.jobs))}


def asker(urls: dict[str, str]):
    clock, metrics = FakeClock(), Registry()
    client = Client(SECRET.encode(), retries=0)
    return ReadAheadAsker(client, urls.get, logging.getLogger("test"), metrics, clock=clock), clock, metrics


def test_asks_go_per_node_in_order_and_a_refusing_node_is_left_alone_for_a_while():
    on, off = CacheStandIn().start(), CacheStandIn(409).start()
    try:
        ahead, clock, metrics = asker({"on": on.url, "off": off.url})
        assert ahead.want("on", ["/b", "/a"]) and ahead.want("on", ["/a", "/c"]) and ahead.want("on", ["/b", "/a"])
        assert ahead.want("off", ["/x"])
        ahead.send()
        assert on.asked == [[["/b", "/a"], ["/a", "/c"]]] and off.asked == [[["/x"]]]  # one job's twice: once
        assert not ahead.want("off", ["/y"])  # refused: not asked again for refused_for
        ahead.send()
        assert off.asked == [[["/x"]]]
        clock.advance(601)
        assert ahead.want("off", ["/y"])
        ahead.send()
        assert off.asked == [[["/x"]], [["/y"]]]
        lines = metrics.render().splitlines()
        assert 'htda_submit_read_ahead_total{outcome="asked"} 4' in lines
        assert 'htda_submit_read_ahead_total{outcome="refused"} 2' in lines
    finally:
        on.stop()
        off.stop()


def test_an_unknown_or_dead_node_costs_the_asks_and_nothing_else():
    ahead, _, metrics = asker({"dead": "http://127.0.0.1:9"})
    ahead.want("dead", ["/a"])
    ahead.want("gone", ["/b", "/c"])
    ahead.send()
    assert 'htda_submit_read_ahead_total{outcome="failed"} 3' in metrics.render().splitlines()
    assert ahead.want("dead", ["/a"])  # a failure is not a refusal: asked again next time
