"""The real-HTCondor pool of the cluster bench: its configuration, the jobs' descriptions, discovery, the job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cluster import condor as condor_mod
from bench.cluster import report
from bench.cluster.condor import CondorPool, CondorSetup, condor_home
from bench.cluster.condor_job import ad_values, cached_inputs
from bench.cluster.topology import Topology
from tests import htcondor_home
from tests.users import User

ROOT = Path(__file__).resolve().parents[2]
USER, CONDOR = User("htdabench", 1500, 1500), User("condor", 1501, 1501)


def _pool(tmp_path: Path, htda: bool) -> CondorPool:
    topo = Topology(prefix="tc", workers=2)
    setup = CondorSetup(roots={"w1": Path("/r/w1/view"), "w2": Path("/r/w2/view")})
    if htda:
        setup = CondorSetup(setup.roots, {"w1": Path("/r/w1/cache0/data"), "w2": Path("/r/w2/cache0/data")},
                            tmp_path / "hooks", tmp_path / "hooks.toml",
                            {"w1": tmp_path / "hooks-w1.toml", "w2": tmp_path / "hooks-w2.toml"})
    return CondorPool(Path("/opt/condor"), topo, tmp_path / "condor", 2, USER, setup, condor=CONDOR)


def test_central_manager_and_startds_are_configured_on_their_hosts(tmp_path):
    pool = _pool(tmp_path, htda=False)
    service, w1 = pool.topo.service, pool.topo.worker_hosts[0]
    central = pool.plumbing(service)
    assert "DAEMON_LIST = MASTER COLLECTOR NEGOTIATOR SCHEDD\n" in central
    assert f"NETWORK_INTERFACE = {service.address}\n" in central
    assert f"COLLECTOR_HOST = {service.address}:9618\n" in central and "CONDOR_IDS = 1501.1501\n" in central
    worker = pool.plumbing(w1)
    assert "DAEMON_LIST = MASTER STARTD\n" in worker and f"NETWORK_INTERFACE = {w1.address}\n" in worker
    assert "NUM_SLOTS_TYPE_1 = 2\n" in worker and "SLOT_TYPE_1_PARTITIONABLE = False\n" in worker
    assert 'STARTER_JOB_ENVIRONMENT = "HTDA_BENCH_WORKER=w1 HTDA_BENCH_ROOT=/r/w1/view HTDA_BENCH_CACHE="' in worker
    last = pool.last_config(service)
    assert f"NEGOTIATOR_INTERVAL = {condor_mod.NEGOTIATOR_INTERVAL}\n" in last and "HTDA_HOOK_DIR" not in last
    assert pool.snippets(service) == [] and pool.snippets(w1) == []


def test_the_htda_run_takes_the_shipped_snippets_verbatim(tmp_path, monkeypatch):
    pool = _pool(tmp_path, htda=True)
    service, w2 = pool.topo.service, pool.topo.worker_hosts[1]
    assert [p.name for p in pool.snippets(service)] == ["50-htda-submit.config", "50-htda-negotiator.config"]
    assert [p.name for p in pool.snippets(w2)] == ["50-htda-worker.config"]
    assert f'JOB_ROUTER_ENVIRONMENT = "HTDA_HOOKS_CONFIG={tmp_path / "hooks.toml"}"' in pool.last_config(service)
    last = pool.last_config(w2)
    assert f'STARTD_CRON_HTDA_ENV = "HTDA_HOOKS_CONFIG={tmp_path / "hooks-w2.toml"}"' in last
    assert "HTDA_BENCH_CACHE=/r/w2/cache0/data" in pool.plumbing(w2)
    monkeypatch.setattr(condor_mod.os, "chown", lambda *a: None)
    pool.write_configs()
    for host in (service, w2):
        confd = tmp_path / "condor" / host.name / "config.d"
        for snippet in pool.snippets(host):
            assert (confd / snippet.name).read_text() == snippet.read_text()  # verbatim
        names = sorted(p.name for p in confd.iterdir())
        assert names[-1] == "99-bench-install.config"  # read after the snippets


def test_a_job_is_one_vanilla_cluster_that_waits_for_htdas_route(tmp_path):
    inputs = ["/store/a.root", "/store/b.root"]
    plain = _pool(tmp_path, htda=False).description("submit.htda-bench#1000.0", 2, inputs)
    assert plain.count("queue") == 1 and "universe = vanilla\n" in plain
    assert '+HTDA_InputFiles = "/store/a.root,/store/b.root"\n' in plain and "+HTDA_Pass = 2\n" in plain
    assert "-m bench.cluster.condor_job --job 'submit.htda-bench#1000.0' /store/a.root /store/b.root" in plain
    assert "requirements" not in plain
    steered = _pool(tmp_path, htda=True).description("submit.htda-bench#1000.0", 2, inputs)
    assert "requirements = (HTDA_Routed =?= true)\n" in steered


def test_discovery_prefers_htda_condor_home(tmp_path, monkeypatch):
    for sub, name in (("sbin", "condor_master"), ("bin", "condor_submit"), ("bin", "condor_config_val")):
        (tmp_path / sub).mkdir(exist_ok=True)
        (tmp_path / sub / name).write_text("")
    monkeypatch.setenv("HTDA_CONDOR_HOME", str(tmp_path))
    assert condor_home() == tmp_path.resolve()
    monkeypatch.setenv("HTDA_CONDOR_HOME", str(tmp_path / "nothing"))
    monkeypatch.setattr(htcondor_home, "SHARED", tmp_path / "nothing")
    monkeypatch.setattr(htcondor_home.shutil, "which", lambda name: None)
    assert condor_home() is None


def test_the_job_reads_its_ads_and_the_cache_device(tmp_path):
    ad = tmp_path / ".job.ad"
    ad.write_text('ClusterId = 7\nHTDA_PreferredNodes = "w2,w1"\nOther = "x"\n')
    assert ad_values(str(ad), ("HTDA_PreferredNodes", "ClusterId")) == {"HTDA_PreferredNodes": "w2,w1",
                                                                         "ClusterId": "7"}
    assert ad_values(str(tmp_path / "missing"), ("SlotID",)) == {} and ad_values(None, ("SlotID",)) == {}
    (tmp_path / "data" / "store").mkdir(parents=True)
    (tmp_path / "data" / "store" / "a.root").write_text("x")
    assert cached_inputs(str(tmp_path / "data"), ["/store/a.root", "/store/b.root"]) == ["/store/a.root"]
    assert cached_inputs("", ["/store/a.root"]) == []


def test_the_report_says_what_placed_the_jobs():
    results = {"modes": {
        "nocache": {"mode": "nocache", "placement": {"negotiator": "condor", "version": "HTCondor 25.14.0",
                                                     "negotiator_interval": "2", "router_polling_period": "2"}},
        "htda": {"mode": "htda", "placement": {"negotiator": "standin"}}}}
    line = report.placement(results)
    assert "nocache: HTCondor 25.14.0, NEGOTIATOR_INTERVAL 2 s" in line and "htda: the stand-in" in line
    assert json.dumps(results)  # JSON-able as results.json keeps it


@pytest.mark.skipif(condor_home() is None, reason=condor_mod.INSTALL_HINT)
def test_the_found_htcondor_has_the_tools_the_bench_runs(tmp_path):
    pool = _pool(tmp_path, htda=False)
    pool.home = condor_home()
    for tool in ("condor_master", "condor_submit", "condor_q", "condor_status", "condor_config_val",
                 "condor_version"):
        assert pool.program(tool).is_file()
