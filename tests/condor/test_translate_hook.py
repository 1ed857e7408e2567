"""The translate hook executable against a live locator and submit agent: what it prints and sends."""

from __future__ import annotations

import time

import classad2
import pytest

from htda.node.client import Client
from htda.protocol.coordinator import input_key
from testkit.http import raw as raw_request
from testkit.nodes import wait_until

from .kit import INPUTS, agent_sections, agent_socket, hook_input, job_ad, parse, run_hook, write_hook_config

HALF = {"/store/data/run1/c.root": 200}  # 200 of the 400 input bytes


def machine(name: str, **attrs) -> classad2.ClassAd:
    return classad2.ClassAd({"Machine": f"{name}.example.org", "HTDA_NodeName": name, "Arch": "X86_64",
                             "OpSys": "LINUX", "Memory": 8000, "Cpus": 4, "Disk": 10**7, "HasFileTransfer": True,
                             **attrs})


def rank(job: classad2.ClassAd, slot: classad2.ClassAd) -> float:
    value = job.lookup("Rank").eval(scope=job, target=slot)
    assert isinstance(value, (int, float)), value
    return float(value)


def test_output_echoes_every_attribute_and_adds_steering(run, agent, hook_config, holdings):
    holdings({"c-all": INPUTS, "c-half": HALF})
    source = job_ad()
    run = run("htda_translate", hook_input(source), hook_config)
    assert run.code == 0, run.stderr
    before, after = parse(source), parse(run.stdout)
    changed = {"Rank", "JobMachineAttrs"}
    for name in before.keys():
        assert name in after, f"{name} missing from the hook's output"
        if name not in changed:
            assert str(after.lookup(name)) == str(before.lookup(name)), name
    assert after["HTDA_PreferredNodes"] == "c-all,c-half"
    assert after["HTDA_CachedFraction"] == 1.0
    assert after["HTDA_InputCount"] == 3
    assert str(after.lookup("Requirements")) == str(before.lookup("Requirements"))
    assert "HTDA_NodeName" in after["JobMachineAttrs"]


def test_rank_orders_all_half_none_and_keeps_the_users_rank(run, agent, hook_config, holdings):
    holdings({"c-all": INPUTS, "c-half": HALF})
    run = run("htda_translate", hook_input(job_ad(Rank="TARGET.Memory")), hook_config)
    job = parse(run.stdout)
    all_, half, none = machine("c-all"), machine("c-half"), machine("c-none")
    assert rank(job, all_) > rank(job, half) > rank(job, none)
    # The user's Rank (Memory) still orders machines that hold the same share...
    assert rank(job, machine("c-none", Memory=16000)) > rank(job, machine("c-other", Memory=8000))
    # ...but never outweighs a larger share.
    assert rank(job, machine("c-half", Memory=4000)) > rank(job, machine("c-none", Memory=64000))


def test_machine_name_is_the_fallback_when_no_htda_name_is_published(run, agent, hook_config, holdings):
    holdings({"c-all.example.org": INPUTS})
    job = parse(run("htda_translate", hook_input(job_ad()), hook_config).stdout)
    bare = classad2.ClassAd({"Machine": "c-all.example.org", "Memory": 1})
    other = classad2.ClassAd({"Machine": "c-x.example.org", "Memory": 1})
    assert rank(job, bare) > rank(job, other)


def test_boolean_and_missing_user_ranks(run, agent, hook_config, holdings):
    holdings({"c-half": HALF})
    job = parse(run("htda_translate", hook_input(job_ad(Rank='TARGET.Machine == "c-x.example.org"')),
                         hook_config).stdout)
    assert rank(job, machine("c-x")) > rank(job, machine("c-y"))
    assert rank(job, machine("c-half")) > rank(job, machine("c-x"))
    job = parse(run("htda_translate", hook_input(job_ad(Rank=None)), hook_config).stdout)
    assert rank(job, machine("c-half")) > rank(job, machine("c-x")) == 0.0


def test_job_is_published_with_evaluated_resources(run, agent, hook_config, holdings, coordinator):
    holdings({"c-all": INPUTS})
    assert run("htda_translate", hook_input(job_ad()), hook_config).code == 0
    wait_until(lambda: coordinator.jobs, timeout=5, what="the job to reach the coordinator")
    job = coordinator.jobs[0]
    assert job["job_id"] == "submit.example.org#4711.3"
    assert job["task"] == "submit.example.org#4711"
    assert job["owner"] == "alice"
    assert job["inputs"] == list(INPUTS)  # run.sh (the user's own file) is not an LFN
    assert job["cpus"] == 2  # RequestCpus = 1 + 1
    assert job["memory"] == 1000  # the RequestMemory expression, evaluated
    assert job["submit_time"] == 1763860000


def test_declared_inputs_win_over_transfer_input(run, agent, hook_config, holdings, coordinator):
    holdings({"c-half": HALF})
    run = run("htda_translate", hook_input(job_ad(HTDA_InputFiles='"/store/data/run1/c.root, /store/x.root"')),
                   hook_config)
    assert parse(run.stdout)["HTDA_CachedFraction"] == 0.5
    wait_until(lambda: coordinator.jobs, timeout=5, what="the job to reach the coordinator")
    assert coordinator.jobs[0]["inputs"] == ["/store/data/run1/c.root", "/store/x.root"]


def test_no_holder_yet_the_job_follows_copies_made_later(run, agent, hook_config, coordinator):
    """Nothing holds the inputs when the job is routed: it requires nothing, but a machine whose cache node
    comes to hold its whole input set (its key in HTDA_CacheGroups) ranks above every other."""
    source = job_ad(Rank="TARGET.Memory")
    run = run("htda_translate", hook_input(source), hook_config)
    assert run.code == 0, run.stderr
    job, before = parse(run.stdout), parse(source)
    wait_until(lambda: coordinator.jobs, timeout=5, what="the job to reach the coordinator")
    key = input_key(coordinator.jobs[0]["inputs"])
    assert job["HTDA_InputKey"] == key and job["HTDA_PreferredNodes"] == ""
    assert str(job.lookup("Requirements")) == str(before.lookup("Requirements"))
    late = machine("c-late", HTDA_CacheGroups=f"0123456789abcdef,{key}")
    others = machine("c-other", HTDA_CacheGroups="0123456789abcdef", Memory=64000)
    assert rank(job, late) > rank(job, others) > rank(job, machine("c-old", Memory=4000))  # the user's Rank after
    assert job.lookup("HTDA_CacheAffinity").eval(scope=job, target=late) == 1.0
    assert job.lookup("HTDA_CacheAffinity").eval(scope=job, target=machine("c-old")) == 0.0  # no list: 0, not error


def test_a_node_that_came_to_hold_the_inputs_meets_the_requirement(run, inprocess_node, locator, coordinator,
                                                                   holdings, tmp_path, sockets):
    """Steered to the node holding half the inputs; a replica of the whole set made after routing also
    matches the required preference, and is preferred to the node named then."""
    node = inprocess_node("strict", ["submit"], seeds=[locator.url],
                          sections=agent_sections([locator.url], [coordinator.url], sockets(), steer_requirements=True))
    config = write_hook_config(tmp_path / "strict.toml", agent_socket(node))
    holdings({"c-half": HALF})
    job = parse(run("htda_translate", hook_input(job_ad(QDate=str(int(time.time())))), config).stdout)
    key = job["HTDA_InputKey"]
    replica = machine("c-new", HTDA_CacheGroups=key)
    assert job.lookup("Requirements").eval(scope=job, target=replica) is True
    assert job.lookup("Requirements").eval(scope=job, target=machine("c-none")) is False
    assert rank(job, replica) > rank(job, machine("c-half"))
    # a group held whole by the node named at routing is the same node: it ranks as a full holder too
    assert rank(job, machine("c-half", HTDA_CacheGroups=key)) == rank(job, replica)


@pytest.mark.parametrize("timeout, waited, elsewhere", [
    (600.0, 10, False),  # submitted 10 s ago: only the node holding the inputs matches
    (600.0, 700, True),  # waited longer than steer_timeout: any node
    (0.0, 100_000, False),  # no timeout: it waits for ever
])
def test_requirements_change_only_when_configured(run, inprocess_node, locator, coordinator, holdings, tmp_path,
                                                  sockets, timeout, waited, elsewhere):
    node = inprocess_node("strict", ["submit"], seeds=[locator.url],
                          sections=agent_sections([locator.url], [coordinator.url], sockets(), steer_requirements=True,
                                                  steer_timeout=timeout))
    config = write_hook_config(tmp_path / "strict.toml", agent_socket(node))
    holdings({"c-all": INPUTS})
    job = parse(run("htda_translate", hook_input(job_ad(QDate=str(int(time.time()) - waited))), config).stdout)
    assert job.lookup("Requirements").eval(scope=job, target=machine("c-all")) is True
    assert job.lookup("Requirements").eval(scope=job, target=machine("c-none")) is elsewhere
    assert "HTDA_UserRequirements" in str(job.lookup("Requirements"))


def test_jobs_whose_inputs_no_node_holds_share_a_first_read_home(run, inprocess_node, locator, coordinator, holdings,
                                                                   tmp_path, sockets):
    agent = inprocess_node("homing", ["submit"], seeds=[locator.url], sections=agent_sections(
        [locator.url], [coordinator.url], sockets(), steer_requirements=True, first_read_home=True, home_timeout=300.0))
    device = {"path": "cache0", "capacity": 64 << 20, "high_watermark": 1.0, "low_watermark": 1.0}
    for name in ("c-one", "c-two"):
        inprocess_node(name, ["cache"], seeds=[agent.url], sections={"cache": {"devices": [device], "cycle": 60.0}})
    wait_until(lambda: {m.name for m in agent.members("cache")} == {"c-one", "c-two"}, what="the cache nodes")
    config = write_hook_config(tmp_path / "homing.toml", agent_socket(agent))
    now = int(time.time())

    def route(inputs: str, waited: int = 0, **changes: str) -> classad2.ClassAd:
        ad = job_ad(HTDA_InputFiles=f'"{inputs}"', QDate=str(now - waited), **changes)
        return parse(run("htda_translate", hook_input(ad), config).stdout)

    first = route("/storage/store/new/a.root, /storage/store/new/b.root")
    home = first["HTDA_HomeNode"]
    other = ({"c-one", "c-two"} - {home}).pop()
    assert first["HTDA_PreferredNodes"] == home and first["HTDA_CachedFraction"] == 0.0
    assert first.lookup("Requirements").eval(scope=first, target=machine(home)) is True
    assert first.lookup("Requirements").eval(scope=first, target=machine(other)) is False
    assert rank(first, machine(home)) > rank(first, machine(other))
    assert first["JobPrio"] == 1  # it reads everything from storage: it starts before cached jobs
    second = route("/storage/store/new/b.root", waited=400)  # shares an input; waited past home_timeout
    assert second["HTDA_HomeNode"] == home
    assert second.lookup("Requirements").eval(scope=second, target=machine(other)) is True
    assert route("/storage/store/new/z.root")["HTDA_HomeNode"] == other  # new data: the node with no job yet
    _, metrics = raw_request("GET", f"{agent.url}/metrics")
    assert f'htda_submit_first_read_homes_total{{node="{home}"}} 2'.encode() in metrics
    assert b"htda_submit_first_read_inputs 3" in metrics
    assert route("/storage/store/new/a.root", JobPrio="5")["JobPrio"] == 5  # a user's own priority stays
    holdings({"c-two": {"/store/new/a.root": 100}})  # once a node holds an input, holders steer, not homes
    held = route("/storage/store/new/a.root, /storage/store/new/b.root", ProcId="1")
    assert held["HTDA_PreferredNodes"] == "c-two" and "HTDA_HomeNode" not in held
    assert held.get("JobPrio", 0) == 0
    _, metrics = raw_request("GET", f"{agent.url}/metrics")
    assert b"htda_submit_routed_jobs 2" in metrics  # job .0 (homed, routed again) and .1 (steered to c-two)


def test_the_executable_runs_through_its_own_shebang(agent, hook_config, holdings):
    holdings({"c-all": INPUTS})
    run = run_hook("htda_translate", hook_input(job_ad()), hook_config, direct=True)
    assert run.code == 0, run.stderr
    assert parse(run.stdout)["HTDA_PreferredNodes"] == "c-all"


def test_a_locator_on_the_agents_node_is_used_directly(inprocess_node, coordinator, tmp_path, run, sockets):
    from testkit.nodes import SECRET

    node = inprocess_node("submit-loc", ["submit", "locator"],
                          sections=agent_sections([], [coordinator.url], sockets()))
    Client(SECRET.encode(), retries=0).post(f"{node.url}/api/v1/locator/holdings", {
        "node": "c-all", "files": [{"lfn": k, "size": v} for k, v in INPUTS.items()], "replace": True})
    out = run("htda_translate", hook_input(job_ad()), write_hook_config(tmp_path / "h.toml", agent_socket(node)))
    assert parse(out.stdout)["HTDA_PreferredNodes"] == "c-all"
    _, metrics = raw_request("GET", f"{node.url}/metrics")
    assert b"\nhtda_locator_lookups_total " not in metrics  # the index was asked directly, not over HTTP


def test_sizes_come_from_the_submit_hosts_view_of_storage(run, inprocess_node, locator, coordinator, tmp_path,
                                                          sockets):
    storage = tmp_path / "storage"
    (storage / "store/data/run1").mkdir(parents=True)
    (storage / "store/data/run1/c.root").write_bytes(b"x" * 1234)
    (storage / "store/x.root").symlink_to("/etc/passwd")  # planted: must not reveal the host's files
    sections = agent_sections([locator.url], [coordinator.url], sockets(), storage_root=str(storage))
    agent = inprocess_node("sizes", ["submit"], seeds=[locator.url], sections=sections)
    config = write_hook_config(tmp_path / "sized.toml", agent_socket(agent))
    run("htda_translate", hook_input(job_ad(HTDA_InputFiles='"/store/data/run1/c.root, /store/x.root"')), config)
    wait_until(lambda: coordinator.jobs, timeout=5, what="the job to reach the coordinator")
    assert coordinator.jobs[0]["sizes"] == {"/store/data/run1/c.root": 1234}


def test_a_job_the_coordinator_would_refuse_is_not_sent_and_blocks_nothing(run, agent, coordinator, hook_config):
    """The agent checks each job with the coordinator's own type before queueing it: one bad job in a batch would
    have the coordinator refuse the whole batch, again at every retry."""
    long_schedd = "s" * 300  # a job id of more than 255 characters
    bad = run("htda_translate", hook_input(job_ad(GlobalJobId=f'"{long_schedd}#4711.3#1763860000"')), hook_config)
    good = run("htda_translate", hook_input(job_ad(ClusterId="4712")), hook_config)
    assert bad.code == good.code == 0
    wait_until(lambda: coordinator.jobs, timeout=5, what="the good job at the coordinator")
    agent.components["submit"].flush()  # what is still queued goes now: the bad job would be in it
    assert [job["job_id"] for job in coordinator.jobs] == ["submit.example.org#4712.3"]
    metrics = raw_request("GET", agent.url + "/metrics")[1].decode()
    assert 'htda_submit_invalid_total{kind="jobs"} 1' in metrics
