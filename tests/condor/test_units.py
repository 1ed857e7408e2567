"""The pieces under the hooks: ClassAd parsing, input mapping, job ids and states, hook settings."""

from __future__ import annotations

import pytest

from htda.condor import classads, jobinfo
from htda.condor.hooks import AGENT_USER, DEFAULTS, SUBMIT_SOCKET, apply_answer, load_settings, split
from htda.condor.jobinfo import InputMapping, job_ids, job_state

from .kit import PREFIXES, job_ad, parse

MAPPING = InputMapping("HTDA_InputFiles", {p["prefix"]: p["lfn"] for p in PREFIXES})


def test_split_follows_the_protocol():
    assert split(b'[ Name = "r" ]\n------\nA = 1\n') == (b'[ Name = "r" ]', b"A = 1\n")
    assert split(b"------\nA = 1\n") == (b"", b"A = 1\n")
    assert split(b"A = 1\n") == (None, b"A = 1\n")


def test_parse_job_refuses_what_htcondor_silently_skips():
    assert classads.parse_job(job_ad())["Owner"] == "alice"
    for bad in ("A = 1\nno equals here\n", "A = 1\nB = (\n", "A = 1\n = 2\n"):
        with pytest.raises(classads.AdError):
            classads.parse_job(bad)


def test_evaluate_expressions_and_undefined():
    ad = parse(job_ad(X="undefined", Y="1/0"))
    assert classads.evaluate(ad, "RequestCpus") == 2
    assert classads.evaluate(ad, "X", "d") == "d"
    assert classads.evaluate(ad, "Y", "d") == "d"
    assert classads.evaluate(ad, "Missing", 5) == 5


@pytest.mark.parametrize("transfer, expected", [
    ('"/storage/store/a.root, rel/b.root"', ["/store/a.root"]),
    ('"root://xrootd.example.org//store/c.root,https://web/x.root"', ["/store/c.root"]),
    ('"/storage/../etc/passwd"', []),  # refused by normalize_lfn, silently not an input
    ('"a.root b.root"', []),
])
def test_transfer_input_mapping(transfer, expected):
    assert MAPPING.lfns(parse(job_ad(TransferInput=transfer))) == expected


def test_relative_entries_resolve_against_iwd():
    mapping = InputMapping("HTDA_InputFiles", {"/data/": "/store/"})
    ad = parse(job_ad(TransferInput='"x/f.root"', Iwd='"/data/run"'))
    assert mapping.lfns(ad) == ["/store/run/x/f.root"]


def test_declared_inputs_are_lfns_unless_a_prefix_maps_them():
    ad = parse(job_ad(HTDA_InputFiles='"/store/a.root,/storage/store/b.root, /store/a.root"'))
    assert MAPPING.lfns(ad) == ["/store/a.root", "/store/b.root"]


@pytest.mark.parametrize("attribute", ["TransferInput", "HTDA_InputFiles"])
def test_names_with_blanks_are_one_input(attribute):
    """Lists are comma-separated, as HTCondor reads transfer_input_files: 'my file.dat' is one file."""
    mapping = InputMapping("HTDA_InputFiles", {"/data/": "/store/data/"})
    ad = parse(job_ad(**{attribute: '" /data/my file.dat ,run 2/b c.root"', "Iwd": '"/data"'}))
    assert mapping.lfns(ad) == ["/store/data/my file.dat", "/store/data/run 2/b c.root"]


class _CountingLFN(str):
    """An LFN that counts how often it is compared for equality."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        _CountingLFN.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_inputs_are_mapped_in_linear_time(monkeypatch):
    """10,000 inputs took 479 ms (every new LFN compared with every earlier one: 50 million
    comparisons); now each is looked up once in a hash table."""
    monkeypatch.setattr(jobinfo, "normalize_lfn", lambda value: _CountingLFN(value))
    _CountingLFN.comparisons = 0
    inputs = [f"/store/run{i // 1000}/file{i:06d}.root" for i in range(10_000)]
    ad = parse(job_ad(HTDA_InputFiles='"' + ",".join(inputs + inputs[:10]) + '"'))
    assert MAPPING.lfns(ad) == inputs
    assert _CountingLFN.comparisons <= 2 * len(inputs)


def test_job_ids_are_shared_by_a_job_and_its_routed_copy():
    assert job_ids(parse(job_ad())) == ("submit.example.org#4711.3", "submit.example.org#4711")
    routed = parse(job_ad(ClusterId="9", ProcId="0", RoutedFromJobId='"4711.3"'))
    assert job_ids(routed)[0] == "submit.example.org#4711.3"


@pytest.mark.parametrize("status, state", [("1", None), ("2", "started"), ("3", "removed"), ("4", "finished"),
                                           ("5", None)])
def test_job_state(status, state):
    assert job_state(parse(job_ad(JobStatus=status)))[0] == state


JOB = b'Cmd = "/bin/true"\nOwner = "alice"\nRank = 0.0\nRequirements = true\n'


@pytest.mark.parametrize("answer, expected", [
    (b"", JOB),
    (b'Rank = 5.0\n', JOB.replace(b"Rank = 0.0", b"Rank = 5.0")),
    (b'RANK = 5.0\n', JOB.replace(b"Rank = 0.0", b"RANK = 5.0")),  # attribute names ignore case
    (b'HTDA_X = 1\njobmachineattrs = "HTDA_NodeName"\n', JOB + b'HTDA_X = 1\njobmachineattrs = "HTDA_NodeName"\n'),
    (b"JobPrio = 1\n", JOB + b"JobPrio = 1\n"),  # a cold job first among its owner's own jobs
    (b'Cmd = "/bin/true"\nRank = 1\n', JOB.replace(b"Rank = 0.0", b"Rank = 1")),  # the job's own Cmd: no change
    (JOB.replace(b"Rank = 0.0", b"Rank = 1").replace(b"Owner", b"owner"), JOB.replace(b"Rank = 0.0", b"Rank = 1")),
])
def test_an_answer_applies_htdas_attributes_only(answer, expected):
    assert apply_answer(JOB, answer) == expected


@pytest.mark.parametrize("answer", [b'Cmd = "/bin/sh"\n', b'Rank = 1\nArgs = "x"\n', b"Rank = 1\nRank = 2\n",
                                    b"not an assignment\n", b"Rank =\n", b"9x = 1\n", b'HTDA X = 1\n',
                                    b"HTDA_X = ][ (\n", b'HTDA_X = "open\n'])
def test_an_answer_changing_anything_else_is_refused(answer):
    with pytest.raises(ValueError):
        apply_answer(JOB, answer)


def test_an_answer_cannot_remove_attributes():
    assert apply_answer(JOB, b"Rank = 2\n").count(b"\n") == JOB.count(b"\n")


def test_a_line_break_is_never_printed_into_an_ad():
    """Old ClassAd syntax has no escape for a line break (HTCondor prints it raw), so a value holding one
    would turn its second half into an attribute of its own: such an ad is refused, not printed."""
    ad = classads.ClassAd({"HTDA_PreferredNodes": 'c1\nCmd = "/bin/sh"', "Rank": 1})
    with pytest.raises(classads.AdError, match="HTDA_PreferredNodes"):
        classads.print_attributes(ad, ["HTDA_PreferredNodes", "Rank"])
    assert list(parse(classads.print_attributes(ad, ["Rank"])).keys()) == ["Rank"]


def test_affinity_expression_quotes_names():
    text = classads.affinity_expression([("a", 1.0), ("b", 0.5)], "N")
    ad = classads.ClassAd({"N": "b"})
    assert classads.expr(text).eval(scope=ad) == 0.5


def test_settings_file(tmp_path):
    path = tmp_path / "hooks.toml"
    path.write_text('node = "http://127.0.0.1:9"  # here\ntimeout = 2\nlog = \'/tmp/x\'\nmax_ad_bytes = 0.5\n')
    settings = load_settings(str(path))
    assert settings["node"] == "http://127.0.0.1:9" and settings["timeout"] == 2.0 and settings["log"] == "/tmp/x"
    assert settings["max_ad_bytes"] == DEFAULTS["max_ad_bytes"]  # wrong type: default kept
    assert load_settings(str(tmp_path / "missing.toml")) == DEFAULTS


def test_shipped_hook_settings_parse():
    from .kit import ROOT

    settings = load_settings(str(ROOT / "config" / "hooks.toml"))
    assert settings["timeout"] < 1.0 and settings["node"].startswith("http://127.0.0.1:")
    assert settings["socket"] == SUBMIT_SOCKET and settings["agent_user"] == AGENT_USER


def test_shipped_submit_node_config_validates():
    from htda.node.runtime import load_config

    from .kit import ROOT

    config = load_config(ROOT / "config" / "htcondor" / "submit-node.toml")
    assert config["node"]["components"] == ["submit"]
    assert config["submit"]["socket"] == load_settings(str(ROOT / "config" / "hooks.toml"))["socket"] == SUBMIT_SOCKET


def test_a_co_located_locator_is_asked_without_an_http_hop(inprocess_node, coordinator, sockets, monkeypatch):
    from htda.node.client import Client
    from testkit.nodes import SECRET

    from .kit import agent_sections

    node = inprocess_node("both", ["locator", "submit"], sections=agent_sections([], [coordinator.url], sockets()))
    client = Client(SECRET.encode(), retries=0)
    try:
        client.post(f"{node.url}/api/v1/locator/holdings",
                    {"node": "c1", "files": [{"lfn": "/store/a", "size": 10}], "replace": True})
    finally:
        client.close()

    def no_http(*args, **kwargs):
        raise AssertionError("the agent went over HTTP to a locator it runs beside")

    monkeypatch.setattr(node.client, "post", no_http)
    answer = node.components["submit"].lookup(["/store/a", "/store/b"])
    assert answer == {"nodes": node.components["locator"].index.lookup(["/store/a", "/store/b"]).nodes}
    assert set(answer["nodes"]) == {"c1"}
