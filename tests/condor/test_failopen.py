"""Fail-open: whatever breaks, the translate hook prints the job ad unchanged, exactly once, exits 0, in time."""

from __future__ import annotations

import subprocess
import time

import pytest

from testkit.http import raw as raw_request
from testkit.nodes import free_port

from .kit import INPUTS, StubbornServer, agent_sections, agent_socket, hook_input, job_ad, parse, write_hook_config

TIMEOUT = 0.5
MARGIN = 0.6  # interpreter start-up on a loaded 2-core machine, and process teardown


def assert_unchanged(run, ad: str) -> None:
    assert run.code == 0, run.stderr
    assert run.stdout == ad.encode()
    assert run.seconds < TIMEOUT + MARGIN, f"took {run.seconds:.2f}s"


def agent_with(inprocess_node, tmp_path, sockets, locators, coordinators, name="agent"):
    node = inprocess_node(name, ["submit"], sections=agent_sections(locators, coordinators, sockets()))
    return write_hook_config(tmp_path / f"{name}.toml", agent_socket(node), timeout=TIMEOUT,
                             log=str(tmp_path / "hooks.log"))


def test_agent_down(run, tmp_path, sockets):
    config = write_hook_config(tmp_path / "h.toml", sockets(), timeout=TIMEOUT, log=str(tmp_path / "hooks.log"))
    assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())
    assert "left unchanged" in (tmp_path / "hooks.log").read_text()


def test_agent_hangs(run, tmp_path, sockets):
    with StubbornServer(delay=30, socket=sockets()) as server:
        config = write_hook_config(tmp_path / "h.toml", server.socket, timeout=TIMEOUT)
        run = run("htda_translate", hook_input(job_ad()), config)
    assert_unchanged(run, job_ad())
    assert b"left unchanged" in run.stderr  # no log file: stderr, which the router records


@pytest.mark.parametrize("status, body", [(200, b"this is not an ad"), (500, b"{}"), (200, b"A = 1\n"),
                                          (200, b"Rank = 1\nno assignment here\n"), (403, b"Rank = 1\n"),
                                          (200, b"Rank = 1\nRANK = 2\n")])
def test_agent_answers_garbage(run, tmp_path, sockets, status, body):
    with StubbornServer(status=status, body=body, socket=sockets()) as server:
        config = write_hook_config(tmp_path / "h.toml", server.socket, timeout=TIMEOUT)
        assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())


@pytest.mark.parametrize("answer", [
    'Cmd = "/bin/sh"\nRank = 5.0\n',  # the squatter's prize: the job's command
    'Args = "-c id"\n',
    'Environment = "LD_PRELOAD=/tmp/x.so"\nHTDA_PreferredNodes = "c-all"\n',
    'Owner = "root"\n',
    'TransferInput = "/etc/shadow"\n',
    'PeriodicRemove = true\n',
    job_ad(Cmd='"/bin/sh"', Rank="5.0"),  # a whole ad, one foreign change in it
])
def test_an_answer_changing_anything_but_htdas_attributes_is_refused(run, tmp_path, sockets, answer):
    with StubbornServer(body=answer.encode(), content_type="text/plain", socket=sockets()) as server:
        config = write_hook_config(tmp_path / "h.toml", server.socket, timeout=TIMEOUT)
        out = run("htda_translate", hook_input(job_ad()), config)
    assert_unchanged(out, job_ad())
    assert b"not HTDA's to change" in out.stderr


@pytest.mark.parametrize("answer", [b"HTDA_CacheAffinity = ][ (\n", b'HTDA_PreferredNodes = "c-all\n',
                                    b"Rank = 1e9 * (HTDA_CacheAffinity\n", b"Requirements = {true]\n"])
def test_an_htda_attribute_cut_short_or_garbled_is_refused(run, tmp_path, sockets, answer):
    """The router drops a job from routing for good when a line of the hook's output does not parse."""
    with StubbornServer(body=answer, content_type="text/plain", socket=sockets()) as server:
        config = write_hook_config(tmp_path / "h.toml", server.socket, timeout=TIMEOUT)
        out = run("htda_translate", hook_input(job_ad()), config)
    assert_unchanged(out, job_ad())
    assert b"not a complete expression" in out.stderr


def test_htdas_attributes_are_applied_and_every_other_line_kept(run, tmp_path, sockets):
    """Rank, Requirements, JobMachineAttrs and HTDA_* (any case) change; a line repeating the job's own
    expression is no change; an attribute the answer leaves out is kept, never deleted."""
    answer = ('rank = 5.0\nHTDA_PreferredNodes = "c-all"\nRequirements = true\njobmachineattrs = "HTDA_NodeName"\n'
              'Cmd = "/home/alice/ana/run.sh"\nHTDA_Quoted = strcat("a\\"(", "]")\n')
    with StubbornServer(body=answer.encode(), content_type="text/plain", socket=sockets()) as server:
        config = write_hook_config(tmp_path / "h.toml", server.socket, timeout=TIMEOUT)
        out = run("htda_translate", hook_input(job_ad()), config)
    assert out.code == 0, out.stderr
    changed = {"rank", "requirements", "jobmachineattrs", "htda_preferrednodes", "htda_quoted"}

    def kept(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.split(" = ")[0].lower() not in changed]

    assert kept(out.stdout.decode()) == kept(job_ad())  # byte for byte, in order
    job = parse(out.stdout)
    assert job["Rank"] == 5.0 and job["Requirements"] is True and job["HTDA_PreferredNodes"] == "c-all"
    assert job["JobMachineAttrs"] == "HTDA_NodeName" and job.eval("HTDA_Quoted") == 'a"(]'
    assert {k.lower() for k in parse(job_ad()).keys()} <= {k.lower() for k in job.keys()}


def test_locator_down(run, inprocess_node, tmp_path, sockets, coordinator):
    config = agent_with(inprocess_node, tmp_path, sockets, [f"http://127.0.0.1:{free_port()}"], [coordinator.url])
    assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())


def test_no_locator_known(run, inprocess_node, tmp_path, sockets, coordinator):
    config = agent_with(inprocess_node, tmp_path, sockets, [], [coordinator.url])
    assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())


def test_locator_slow(run, inprocess_node, tmp_path, sockets, coordinator):
    with StubbornServer(delay=30, body=b'{"files": {}, "nodes": {"c1": {"fraction": 1.0}}}') as slow:
        config = agent_with(inprocess_node, tmp_path, sockets, [slow.url], [coordinator.url])
        assert_unchanged(run("htda_translate", hook_input(job_ad()), config), job_ad())


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"files": {}}', b'{"nodes": {"c1": {"fraction": "x"}}}',
                                  b'{"nodes": {"c\\"1": {"fraction": 0.5}}}', b'{"nodes": {"c1": 7}}',
                                  b'{"nodes": {"c1\\nCmd = \\"/bin/sh\\"": {"fraction": 0.5}}}',
                                  b'{"nodes": {"c1\\r": {"fraction": 0.5}}}'])
def test_locator_answers_garbage(run, inprocess_node, tmp_path, sockets, coordinator, body):
    with StubbornServer(body=body) as server:
        config = agent_with(inprocess_node, tmp_path, sockets, [server.url], [coordinator.url])
        out = run("htda_translate", hook_input(job_ad()), config)
    assert_unchanged(out, job_ad())
    assert parse(out.stdout).keys() == parse(job_ad()).keys()  # no attribute smuggled in by a line break


def test_coordinator_down_does_not_matter(run, inprocess_node, locator, holdings, tmp_path, sockets):
    holdings({"c-all": INPUTS})
    config = agent_with(inprocess_node, tmp_path, sockets, [locator.url], [f"http://127.0.0.1:{free_port()}"])
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


def test_a_huge_ad_is_printed_once_when_the_router_reads_late(run, tmp_path, agent):
    """The router may not read standard output before the hook's deadline: the ad (over max_ad_bytes,
    larger than a pipe holds) must still come out exactly once, not again when the alarm fires."""
    hook_config = write_hook_config(tmp_path / "h.toml", agent_socket(agent), timeout=TIMEOUT)
    ad = job_ad(Huge='"' + "x" * (2 * 1024 * 1024) + '"')
    argv = run.argv("htda_translate")
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={"PATH": "/usr/bin:/bin", "HTDA_HOOKS_CONFIG": str(hook_config)})
    proc.stdin.write(hook_input(ad))
    proc.stdin.close()
    time.sleep(TIMEOUT + 0.5)  # the alarm has fired while the hook waits for us to read
    out = proc.stdout.read()
    proc.wait(timeout=10)
    assert proc.returncode == 0, proc.stderr.read()
    assert len(out) == len(ad.encode()) and out == ad.encode()


def test_job_without_inputs(run, hook_config):
    ad = job_ad(TransferInput=None)
    assert_unchanged(run("htda_translate", hook_input(ad), hook_config), ad)


def test_no_separator_and_empty_input(run, hook_config):
    alone = run("htda_translate", job_ad().encode(), hook_config)  # a job ad alone is still a job ad
    assert alone.code == 0 and parse(alone.stdout)["HTDA_InputKey"], alone.stderr
    assert_unchanged(run("htda_translate", b"", hook_config), "")


def test_the_agent_serves_hooks_on_no_tcp_port(agent):
    """The old endpoint on the node's port, which any local user could serve while the agent was down, is gone."""
    for path in ("/api/v1/submit/translate", "/api/v1/submit/events?hook=cleanup"):
        status, _ = raw_request("POST", agent.url + path, hook_input(job_ad()))
        assert status == 404, path


def test_unknown_hook_settings_are_ignored(run, tmp_path, hook_config):
    text = hook_config.read_text() + "bogus = 1\ntimeout = \"soon\"\nnot a line\n"
    hook_config.write_text(text)
    run = run("htda_translate", hook_input(job_ad(TransferInput=None)), hook_config)
    assert run.code == 0 and run.stdout == job_ad(TransferInput=None).encode()
