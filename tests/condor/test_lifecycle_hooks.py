"""update_job_info / job_finalize / job_cleanup: report state changes, print nothing, exit 0."""

from __future__ import annotations

import time

import pytest

from testkit.nodes import wait_until

from .kit import job_ad, write_hook_config

RUNNING = {"JobStatus": "2", "RemoteHost": '"slot1_1@c-all.example.org"', "MachineAttrHTDA_NodeName0": '"c-all"'}


def events_after(coordinator, run, n=1):
    assert run.code == 0, run.stderr
    assert run.stdout == b""
    wait_until(lambda: len(coordinator.events) >= n, timeout=5, what="events at the coordinator")
    return coordinator.events


def test_update_reports_a_start_on_the_node(run, hook_config, coordinator):
    events = events_after(coordinator, run("htda_update_job_info", job_ad(**RUNNING).encode(), hook_config))
    assert events[0]["job_id"] == "submit.example.org#4711.3"
    assert events[0]["state"] == "started" and events[0]["node"] == "c-all"
    assert abs(events[0]["time"] - time.time()) < 60


def test_node_falls_back_to_the_remote_host_name(run, hook_config, coordinator):
    ad = job_ad(JobStatus="2", RemoteHost='"slot1@c-7.example.org"')
    assert events_after(coordinator, run("htda_update_job_info", ad.encode(), hook_config))[0]["node"] == "c-7"


def test_finalize_reads_the_routed_ad_after_the_separator(run, hook_config, coordinator):
    routed = job_ad(ClusterId="5000", ProcId="0", JobStatus="4", RoutedFromJobId='"4711.3"',
                    GlobalJobId='"submit.example.org#5000.0#1763860100"')
    stdin = f"{job_ad()}------\n{routed}".encode()
    event = events_after(coordinator, run("htda_job_finalize", stdin, hook_config))[0]
    assert event["job_id"] == "submit.example.org#4711.3" and event["state"] == "finished"


def test_cleanup_reports_removal_and_ignores_idle_jobs(run, hook_config, coordinator):
    assert run("htda_job_cleanup", job_ad().encode(), hook_config).code == 0  # in-place edit done: idle
    events = events_after(coordinator, run("htda_job_cleanup", job_ad(JobStatus="3").encode(), hook_config))
    assert [e["state"] for e in events] == ["removed"]


@pytest.mark.parametrize("hook", ["htda_update_job_info", "htda_job_finalize", "htda_job_cleanup"])
@pytest.mark.parametrize("stdin", [b"garbage without equals\n", b""])
def test_lifecycle_hooks_exit_0_on_bad_input(run, hook_config, hook, stdin):
    run = run(hook, stdin, hook_config)
    assert run.code == 0 and run.stdout == b""


@pytest.mark.parametrize("hook", ["htda_update_job_info", "htda_job_finalize", "htda_job_cleanup"])
def test_lifecycle_hooks_exit_0_when_the_agent_is_down(run, tmp_path, sockets, hook):
    config = write_hook_config(tmp_path / "h.toml", sockets(), timeout=0.3)
    run = run(hook, job_ad(**RUNNING).encode(), config)
    assert run.code == 0 and run.stdout == b"" and run.seconds < 1.0
