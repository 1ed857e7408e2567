"""The lifecycle hooks on the real job router: which hooks it runs, on which ad, for the shipped route
(it edits jobs in place) and for the routed-copy variant docs/htcondor.rst describes, and which
events reach the coordinator in each case."""

from __future__ import annotations

import re
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass

import pytest

from htda.node.client import Client
from testkit.nodes import SECRET, wait_until

from .pool import SNIPPETS, job_description, parse_ads

pytestmark = pytest.mark.slow

INPUTS = {"/store/htda-test/run3/c.root": 4000, "/store/htda-test/run3/d.root": 4000}
#: every hook the router knows, pointed at HTDA's installed ones (the shipped snippet sets only the translate
#: hook), and a faster router poll than the shipped 5 s (it changes when hooks run, not which)
ALL_HOOKS = {"HTDA_HOOK_UPDATE_JOB_INFO": "$(HTDA_HOOK_DIR)/htda_update_job_info",
             "HTDA_HOOK_JOB_FINALIZE": "$(HTDA_HOOK_DIR)/htda_job_finalize",
             "HTDA_HOOK_JOB_CLEANUP": "$(HTDA_HOOK_DIR)/htda_job_cleanup",
             "JOB_ROUTER_POLLING_PERIOD": "1"}
WAITS_FOR_ROUTING = "(MY.HTDA_Routed =?= true)"  # else a job matched before the router saw it runs unrouted
RUNS_FOR = 5  # seconds: several router polls, so an UPDATE_JOB_INFO can see the job running


def shipped_route() -> str:
    """The ``JOB_ROUTER_ROUTE_HTDA @=rt ... @rt`` block of the shipped submit snippet."""
    text = (SNIPPETS / "50-htda-submit.config").read_text()
    match = re.search(r"^JOB_ROUTER_ROUTE_HTDA @=rt\n.*?^@rt\n", text, re.MULTILINE | re.DOTALL)
    assert match, "the shipped submit snippet has no JOB_ROUTER_ROUTE_HTDA block"
    return match.group(0)


def routed_copy_route() -> str:
    """The shipped route made to submit a routed copy, as docs/htcondor.rst says: drop ``EditJobInPlace``."""
    route = shipped_route()
    assert "EditJobInPlace = true" in route
    return "".join(line for line in route.splitlines(keepends=True) if "EditJobInPlace" not in line)


def hook_calls(url: str) -> Counter:
    """The agent's ``htda_submit_events_total`` samples: ``{(hook, state): count}``."""
    text = Client(SECRET.encode(), retries=0).text(f"{url}/metrics")
    calls: Counter = Counter()
    for hook, state, value in re.findall(r'^htda_submit_events_total\{hook="(\w+)",state="(\w+)"\} (\S+)$',
                                         text, re.MULTILINE):
        calls[(hook, state)] += int(float(value))
    return calls


def coordinator_record(htda_pool, job: str) -> tuple[int, dict[str, str | None]]:
    """What the coordinator recorded of a job (``cluster.proc``): how many job records, and the
    events ``{state: node}``."""
    database = htda_pool.agent.config.parent / "data" / "submit" / "coordinator.db"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        records = db.execute("SELECT count(*) FROM htda_jobs WHERE job_id LIKE ?", (f"%#{job}",)).fetchone()[0]
        rows = db.execute("SELECT e.state, e.node FROM htda_job_events e JOIN htda_jobs j ON j.id = e.job "
                          "WHERE j.job_id LIKE ?", (f"%#{job}",)).fetchall()
    return records, dict(rows)


@dataclass
class Run:
    """One job through a route: the hooks the router ran (``{(hook, state): calls}``, translate aside),
    what the coordinator recorded, and the history ads of the job and of its routed copy (if any)."""

    calls: Counter
    records: int
    events: dict[str, str | None]
    job: dict[str, str]
    copy: dict[str, str] | None


def run_through(htda_pool, route: str, cleaned: tuple[str, str]) -> Run:
    """Run one short job, whose inputs node w1 holds, through ``route`` with every hook configured; done once
    the ``cleaned`` (hook, state) call came.  The agent's counters are the pool's: a job of an earlier test
    may have a clean-up hook run now as well, which the tests allow for."""
    pool, owner = htda_pool.pool, htda_pool.owners[0]
    htda_pool.report_holdings({"w1": INPUTS, "w2": {}})
    with pool.knobs(None, route, **ALL_HOOKS):
        before = hook_calls(htda_pool.agent.url)
        description = {**job_description(list(INPUTS), requirements=WAITS_FOR_ROUTING),
                       "executable": "/bin/sleep", "arguments": str(RUNS_FOR)}
        job = pool.submit(owner, description)
        try:
            done = pool.wait_finished(job, timeout=120)
            # the clean-up hook runs once the router lets go of the job, the agent sends events in batches
            calls = wait_until(lambda: (c := hook_calls(htda_pool.agent.url) - before) and c[cleaned] and c,
                               timeout=30, interval=0.5, what=f"the {cleaned} hook call")
            time.sleep(1.0)  # one more agent batch
        finally:
            pool.remove(job, owner)
    copies = parse_ads(pool.tool("condor_history", "-l", "-constraint", f'RoutedFromJobId == "{job}"').stdout)
    return Run(calls, *coordinator_record(htda_pool, job), done, copies[0] if copies else None)


def test_the_shipped_in_place_route_runs_only_the_clean_up_hook_on_the_idle_job(htda_pool):
    """docs/htcondor.rst: the router hands an in-place job back at once; UPDATE_JOB_INFO and
    JOB_FINALIZE never run, JOB_CLEANUP runs on the still idle job, and the coordinator learns of the
    job from the translate hook only."""
    run = run_through(htda_pool, shipped_route(), ("cleanup", "none"))
    assert run.job["HTDA_Routed"] == "true" and '"w1"' in run.job["HTDA_CacheAffinity"]
    assert run.copy is None
    assert set(run.calls) == {("cleanup", "none")}  # no update, no finalize, no event
    assert (run.records, run.events) == (1, {})


def test_a_routed_copy_runs_every_hook_and_the_coordinator_learns_start_and_end(htda_pool):
    """docs/htcondor.rst: without EditJobInPlace the router runs all four hooks; the events carry the
    source job's id and the HTDA name of the node the copy ran on."""
    run = run_through(htda_pool, routed_copy_route(), ("cleanup", "finished"))
    assert run.copy is not None, "the route submitted no routed copy"
    ran_on = run.copy["LastRemoteHost"].strip('"').split("@")[1]  # slot1_1@w1@host -> w1
    assert run.copy["MachineAttrHTDA_NodeName0"] == f'"{ran_on}"'
    assert run.calls[("update", "started")] >= 1 and run.calls[("finalize", "finished")] == 1
    assert run.calls[("cleanup", "finished")] == 1
    assert set(run.calls) <= {("update", "none"), ("update", "started"), ("finalize", "finished"),
                              ("cleanup", "finished"), ("cleanup", "none")}  # none: an earlier test's job
    assert (run.records, run.events) == (1, {"started": ran_on, "finished": ran_on})
