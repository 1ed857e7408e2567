"""First-read homes (:mod:`htda.condor.homes`) on an injected clock."""

from __future__ import annotations

from htda.condor.homes import Homes
from testkit.clock import FakeClock


def homes(**kw) -> tuple[Homes, FakeClock]:
    clock = FakeClock()
    return Homes(ttl=kw.pop("ttl", 3600.0), window=kw.pop("window", 300.0), clock=clock, **kw), clock


def test_jobs_sharing_an_input_get_one_home_and_new_inputs_go_to_the_least_loaded():
    h, _ = homes()
    first = h.choose(["/a", "/b"], ["w1", "w2", "w3"])
    assert h.choose(["/a", "/b"], ["w1", "w2", "w3"]) == first
    assert h.choose(["/b", "/z"], ["w1", "w2", "w3"]) == first  # one shared input is enough
    others = {h.choose([f"/new{i}"], ["w1", "w2", "w3"]) for i in range(2)}
    assert others == {"w1", "w2", "w3"} - {first}  # each new group to a node with no job yet


def test_most_inputs_win_and_the_home_follows_the_inputs():
    h, _ = homes()
    nodes = ["w1", "w2"]
    one = h.choose(["/a", "/b"], nodes)
    other = h.choose(["/c"], nodes)
    assert one != other
    assert h.choose(["/a", "/b", "/c"], nodes) == one  # two inputs of one home beat one of the other
    assert h.choose(["/c"], nodes) == one  # /c moved with that job


def test_load_counts_only_reads_of_the_window():
    h, clock = homes(window=100.0)
    for i in range(3):
        assert h.choose([f"/hot{i}", "/hot"], ["w1", "w2"]) == h.choose(["/hot"], ["w1", "w2"])
    busy = h.choose(["/hot"], ["w1", "w2"])
    idle = ({"w1", "w2"} - {busy}).pop()
    assert h.choose(["/fresh1"], ["w1", "w2"]) == idle
    clock.advance(101)  # the window has passed: no node is loaded, the hash decides
    picks = {h.choose([f"/later{i}"], ["w1", "w2"]) for i in range(40)}
    assert picks == {"w1", "w2"}


def test_a_home_expires_and_a_departed_node_is_never_chosen():
    h, clock = homes(ttl=50.0, window=1.0)
    home = h.choose(["/a"], ["w1", "w2"])
    other = ({"w1", "w2"} - {home}).pop()
    assert h.choose(["/a"], [other]) == other  # its home left the pool
    clock.advance(51)
    assert h.choose(["/a"], ["w1", "w2"]) in {"w1", "w2"}
    assert h.choose(["/a"], []) is None
    assert h.choose([], ["w1"]) is None


def test_memory_is_bounded():
    h, _ = homes(limit=10)
    for i in range(100):
        h.choose([f"/f{i}"], ["w1"])
    assert len(h) == 10


def test_a_new_dataset_goes_where_fewer_jobs_wait_then_where_fewer_new_inputs_were_sent():
    """Slots before reads: the storage link is shared, but a node's jobs queue for its own slots."""
    h, _ = homes()
    nodes = ["w1", "w2"]
    small = [f"/small/{i}" for i in range(3)]
    first = h.choose(small, nodes, "j0")
    for j in range(1, 4):
        assert h.choose(small, nodes, f"j{j}") == first  # the same dataset: no new reads, but four jobs
    second = h.choose([f"/large/{i}" for i in range(6)], nodes, "j4")
    assert second != first
    assert h.choose(["/next/0"], nodes, "j5") == second  # 1 job (6 reads) there, 4 jobs (3 reads) here
    assert h.choose(["/next/1"], nodes) == second  # 2 jobs against 4; a job without an id is not counted
    h.choose(["/next/2"], nodes, "j6")
    h.choose(["/next/3"], nodes, "j7")  # 4 jobs each: the node with fewer first reads
    assert h.choose(["/next/4"], nodes) == first


def test_jobs_steered_to_copies_count_and_finished_jobs_do_not():
    """The case measured at skew 0.6: a node whose copies draw three jobs gets no new dataset."""
    h, _ = homes()
    nodes = ["w1", "w2", "w3"]
    for j in range(3):
        h.routed(f"warm{j}", ["w1"])
    h.routed("replicated", ["w2", "w3"])  # half a job each
    picks = [h.choose([f"/new{i}/a", f"/new{i}/b"], nodes, f"cold{i}") for i in range(3)]
    assert "w1" not in picks[:2] and set(picks[:2]) == {"w2", "w3"}
    assert picks[2] in {"w2", "w3"}  # 1.5 jobs each against 3
    assert h.jobs() == 7
    for j in range(3):
        h.job_event(f"warm{j}", "finished", "w1")
    h.job_event("replicated", "removed", None)
    assert h.jobs() == 3
    assert h.choose(["/later"], nodes, "cold9") == "w1"  # no jobs left there


def test_a_started_job_counts_where_it_runs_and_lapses_without_news():
    h, clock = homes(window=100.0)
    nodes = ["w1", "w2"]
    home = h.choose(["/a"], nodes, "j1")
    other = ({"w1", "w2"} - {home}).pop()
    h.job_event("j1", "started", other)  # the home's wait ran out: it runs elsewhere
    assert h.choose(["/b"], nodes, "j2") == home
    clock.advance(60)
    h.job_event("j1", None, None)  # still running (an update hook's report): still counted
    h.job_event("unknown", None, None)  # a job never routed is not made up
    assert h.jobs() == 2
    clock.advance(50)  # j2 has had no news for 110 s: it lapses; j1 had news 50 s ago
    assert h.jobs() == 1
    assert h.choose(["/c"], nodes, "j3") == home
    h.job_event("j1", "finished", other)
    h.job_event("j3", "finished", home)
    assert h.jobs() == 0


def test_jobs_remembered_are_bounded():
    h, _ = homes(limit=10)
    for i in range(100):
        h.routed(f"j{i}", ["w1", "w2", "w3"])
    assert h.jobs() == 10
    for i in range(90, 100):
        h.job_event(f"j{i}", "finished", None)
    assert h.jobs() == 0
    assert h.choose(["/x"], ["w1"], "last") == "w1"
