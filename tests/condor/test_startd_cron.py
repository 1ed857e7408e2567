"""The STARTD_CRON script prints the node's HTDA name for the machine ad, and never fails."""

from __future__ import annotations

import subprocess

import classad2

from htda.condor.hooks import DEFAULTS
from htda.condor.machine_ad import CACHE_ATTRIBUTES, GROUPS_ATTRIBUTE
from htda.condor.startd_cron import watch
from htda.protocol.cache import CacheFacts
from htda.protocol.coordinator import input_key
from testkit.nodes import free_port, wait_until

from .kit import HOOKS, run_hook, write_hook_config


def machine_ad(stdout: bytes) -> classad2.ClassAd:
    text = stdout.decode()
    body, _, end = text.rstrip("\n").rpartition("\n")
    assert end in ("-", "- update:true") and text.endswith("\n"), text  # the end-of-ad line
    return classad2.parseOne(body + "\n", classad2.ParserType.Old)


def end_line(stdout: bytes) -> str:
    return stdout.decode().rstrip("\n").rpartition("\n")[2]


def test_prints_the_local_node_name(inprocess_node, tmp_path):
    node = inprocess_node("worker-7", ["locator"])
    run = run_hook("htda_startd_cron", b"", write_hook_config(tmp_path / "h.toml", node=node.url), direct=True)
    assert run.code == 0, run.stderr
    ad = machine_ad(run.stdout)
    assert ad["HTDA_NodeName"] == "worker-7" and ad["HTDA_Up"] is True


def test_node_down_still_prints_an_ad(tmp_path):
    run = run_hook("htda_startd_cron", b"", write_hook_config(tmp_path / "h.toml", node=f"http://127.0.0.1:{free_port()}"),
                   direct=True)
    assert run.code == 0
    ad = machine_ad(run.stdout)
    assert ad["HTDA_Up"] is False and ad["HTDA_NodeName"]


def test_names_are_written_in_old_classad_syntax(inprocess_node, tmp_path):
    """Old syntax escapes only the double quote: JSON's escapes (``\\\\``) would change the name the
    startd publishes, and the translate hook's affinity would never match it."""
    node = inprocess_node('w\\1"x', ["locator"])
    run = run_hook("htda_startd_cron", b"", write_hook_config(tmp_path / "h.toml", node=node.url), direct=True)
    assert machine_ad(run.stdout)["HTDA_NodeName"] == 'w\\1"x'


def test_the_machine_attributes_name_facts_a_cache_node_publishes():
    assert set(CACHE_ATTRIBUTES) <= set(CacheFacts.__struct_fields__)


def test_publishes_the_input_groups_its_cache_holds_and_asks_for_an_update_once(cached_node, tmp_path):
    """The demo job's two files copied: the machine ad lists that job's input key, and the ad goes to the
    collector at once while the change is newer than the cron period (one forced update per change)."""
    key = input_key(cached_node.lfns)
    soon = write_hook_config(tmp_path / "soon.toml", node=cached_node.url, cron_period=600.0)

    def published():
        run = run_hook("htda_startd_cron", b"", soon, direct=True)
        assert run.code == 0, run.stderr
        return run if key in machine_ad(run.stdout)[GROUPS_ATTRIBUTE].split(",") else None

    run = wait_until(published, timeout=10, what="the input key in the machine ad")
    assert end_line(run.stdout) == "- update:true"
    later = run_hook("htda_startd_cron", b"", write_hook_config(tmp_path / "later.toml", node=cached_node.url,
                                                                 cron_period=0.001), direct=True)
    assert end_line(later.stdout) == "-" and key in machine_ad(later.stdout)[GROUPS_ATTRIBUTE]


def test_a_node_without_a_cache_publishes_an_empty_list(inprocess_node, tmp_path):
    """So that a list published before (the cache role removed, the node restarted) is replaced."""
    node = inprocess_node("worker-8", ["locator"])
    run = run_hook("htda_startd_cron", b"", write_hook_config(tmp_path / "h.toml", node=node.url), direct=True)
    assert machine_ad(run.stdout)[GROUPS_ATTRIBUTE] == "" and end_line(run.stdout) == "-"


class Ticks:
    """The watch's clock and sleep: time moves only by the sleeps."""

    def __init__(self):
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_watch_prints_at_once_on_a_change_and_otherwise_only_to_refresh(inprocess_node):
    """Ads come when the node's name, state or groups change (each forcing a collector update), and
    between changes only every ``refresh`` seconds; the settings are read again in every round."""
    first, second = inprocess_node("w-a", ["locator"]), inprocess_node("w-b", ["locator"])
    nodes = iter([first.url] * 4 + [second.url] * 2 + [f"http://127.0.0.1:{free_port()}"] * 2)  # a round each 2 s
    printed: list[bytes] = []
    ticks = Ticks()
    watch(printed.append, refresh=5.0, rounds=8, clock=ticks.clock, sleep=ticks.sleep,
          settings=lambda: {**DEFAULTS, "node": next(nodes), "watch_interval": 2.0})
    ads = [(machine_ad(out)["HTDA_NodeName"], machine_ad(out)["HTDA_Up"], end_line(out)) for out in printed]
    assert ads == [("w-a", True, "- update:true"),  # t=0: the first ad
                   ("w-a", True, "-"),  # t=6: nothing changed, refreshed after 5 s
                   ("w-b", True, "- update:true"),  # t=8: another node answers
                   (ads[3][0], False, "- update:true")]  # t=12: the node is down
    assert ticks.now == 14.0  # seven pauses of watch_interval


def test_the_watching_script_exits_when_the_startd_stops_reading(cached_node, tmp_path):
    config = write_hook_config(tmp_path / "w.toml", node=cached_node.url, watch_interval=0.2)
    proc = subprocess.Popen([str(HOOKS / "htda_startd_cron"), "--watch"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin", "HTDA_HOOKS_CONFIG": str(config)})
    try:
        out = b""
        while not out.endswith(b"- update:true\n"):
            out += proc.stdout.read1(65536)
        assert input_key(cached_node.lfns) in machine_ad(out)[GROUPS_ATTRIBUTE]
        proc.stdout.close()  # the startd went away
        assert proc.wait(timeout=10) == 0  # within a round, though it has nothing new to print
    finally:
        proc.kill()
