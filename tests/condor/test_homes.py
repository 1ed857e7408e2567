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


def test_a_new_dataset_goes_where_fewer_new_inputs_were_sent_not_fewer_jobs():
    """Cold jobs are bound by the storage link: four jobs of one 3-file dataset read less than one of six."""
    h, _ = homes()
    nodes = ["w1", "w2"]
    small = [f"/small/{i}" for i in range(3)]
    first = h.choose(small, nodes)
    for _ in range(3):
        assert h.choose(small, nodes) == first  # the same dataset: no new reads
    second = h.choose([f"/large/{i}" for i in range(6)], nodes)
    assert second != first  # 3 inputs homed at the first node, none at the other
    assert h.choose(["/next/0"], nodes) == first  # 4 jobs but 3 reads there, 1 job but 6 reads at the other
