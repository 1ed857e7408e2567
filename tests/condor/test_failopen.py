"""Fail-open: whatever breaks, the translate hook prints the job ad unchanged, exits 0, in time."""

from __future__ import annotations

import pytest

from htda.node.client import Client
from htda.testing.nodes import free_port

from .kit import INPUTS, StubbornServer, agent_sections, hook_input, job_ad, write_hook_config

TIMEOUT = 0.5
MARGIN = 0.6  # interpreter start-up on a loaded 2-core machine, and process teardown


def assert_unchanged(run, ad: str) -> None:
    assert run.code == 0, run.stderr
    assert run.stdout == ad.encode()
    assert run.seconds < TIMEOUT + MARGIN, f"took {run.seconds:.2f}s"


def agent_with(inprocess_node, tmp_path, locators, coordinators, name="agent"):
    node = inprocess_node(name, ["submit"], sections=agent_sections(locators, coordinators))
    return write_hook_config(tmp_path / f"{name}.toml", node.url, timeout=TIMEOUT, log=str(tmp_path / "hooks.log"))


def test_agent_down(run, tmp_path):
    config = write_hook_config(tmp_path / "h.toml", f"http://127.0.0.1:{free_port()}", timeout=TIMEOUT,
                               log=str(tmp_path / "hooks.log"))
    assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())
    assert "left unchanged" in (tmp_path / "hooks.log").read_text()


def test_agent_hangs(run, tmp_path):
    with StubbornServer(delay=30) as server:
        config = write_hook_config(tmp_path / "h.toml", server.url, timeout=TIMEOUT)
        run = run("htda_translate", hook_input(job_ad()), config)
    assert_unchanged(run, job_ad())
    assert b"left unchanged" in run.stderr  # no log file: stderr, which the router records


@pytest.mark.parametrize("status, body", [(200, b"this is not an ad"), (200, b""), (500, b"{}"),
                                          (200, b"A = 1\n")])
def test_agent_answers_garbage(run, tmp_path, status, body):
    with StubbornServer(status=status, body=body) as server:
        config = write_hook_config(tmp_path / "h.toml", server.url, timeout=TIMEOUT)
        assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())


def test_locator_down(run, inprocess_node, tmp_path, coordinator):
    config = agent_with(inprocess_node, tmp_path, [f"http://127.0.0.1:{free_port()}"], [coordinator.url])
    assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())


def test_no_locator_known(run, inprocess_node, tmp_path, coordinator):
    config = agent_with(inprocess_node, tmp_path, [], [coordinator.url])
    assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())


def test_locator_slow(run, inprocess_node, tmp_path, coordinator):
    with StubbornServer(delay=30, body=b'{"files": {}, "nodes": {"c1": {"fraction": 1.0}}}') as slow:
        config = agent_with(inprocess_node, tmp_path, [slow.url], [coordinator.url])
        assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"files": {}}', b'{"nodes": {"c1": {"fraction": "x"}}}',
                                  b'{"nodes": {"c\\"1": {"fraction": 0.5}}}', b'{"nodes": {"c1": 7}}'])
def test_locator_answers_garbage(run, inprocess_node, tmp_path, coordinator, body):
    with StubbornServer(body=body) as server:
        config = agent_with(inprocess_node, tmp_path, [server.url], [coordinator.url])
        assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())


def test_coordinator_down_does_not_matter(run, inprocess_node, locator, holdings, tmp_path):
    holdings({"c-all": INPUTS})
    config = agent_with(inprocess_node, tmp_path, [locator.url], [f"http://127.0.0.1:{free_port()}"])
    run = run("htda_translate", hook_input(job_ad()), config)
    assert run.code == 0 and b"HTDA_PreferredNodes" in run.stdout  # publishing is queued, not awaited


@pytest.mark.parametrize("ad", [
    job_ad() + "this line is not an attribute\n",
    job_ad() + "Broken = (1 +\n",
    job_ad().replace("\n", "\r\n"),
])
def test_malformed_ad(run, hook_config, ad):
    assert_unchanged(run("htda_translate", hook_input(ad), hook_config), ad)


def test_huge_ad(run, hook_config):
    ad = job_ad(Huge='"' + "x" * (4 * 1024 * 1024) + '"')
    assert_unchanged(run("htda_translate", hook_input(ad), hook_config), ad)


def test_job_without_inputs(run, hook_config):
    ad = job_ad(TransferInput=None)
    assert_unchanged(run("htda_translate", hook_input(ad), hook_config), ad)


def test_no_separator_and_empty_input(run, hook_config):
    assert_unchanged(run("htda_translate", job_ad().encode(), hook_config), job_ad())
    assert_unchanged(run("htda_translate", b"", hook_config), "")


def test_agent_refuses_other_networks(inprocess_node, tmp_path, locator, coordinator):
    node = inprocess_node("closed", ["submit"],
                          sections=agent_sections([locator.url], [coordinator.url], allow_networks=["10.0.0.0/8"]))
    status, body = Client(None, retries=0).raw("POST", node.url + "/api/v1/submit/translate", hook_input(job_ad()))
    assert status == 403, body


def test_unknown_hook_settings_are_ignored(run, tmp_path, hook_config):
    text = hook_config.read_text() + "bogus = 1\ntimeout = \"soon\"\nnot a line\n"
    hook_config.write_text(text)
    run = run("htda_translate", hook_input(job_ad(TransferInput=None)), hook_config)
    assert run.code == 0 and run.stdout == job_ad(TransferInput=None).encode()
