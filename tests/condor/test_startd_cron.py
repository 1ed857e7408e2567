"""The STARTD_CRON script prints the node's HTDA name for the machine ad, and never fails."""

from __future__ import annotations

import classad2

from htda.condor.startd_cron import CACHE_ATTRIBUTES
from htda.protocol.cache import CacheFacts
from testkit.nodes import free_port

from .kit import run_hook, write_hook_config


def machine_ad(stdout: bytes) -> classad2.ClassAd:
    text = stdout.decode()
    assert text.endswith("\n-\n"), text  # the end-of-ad line
    return classad2.parseOne(text[: -len("-\n")], classad2.ParserType.Old)


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
