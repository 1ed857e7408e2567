"""Pool membership (:class:`htda.node.pool.Pool`) on a fake clock: the seed's member-list answer
(:meth:`~htda.node.pool.Pool.receive_json`), a silent member's expiry, members learned through a seed."""

from __future__ import annotations

import json

from htda.node.pool import Member, Pool
from htda.protocol.node import MemberInfo
from testkit.clock import FakeClock


def beat(name: str, started: float = 1.0) -> dict:
    return {"name": name, "url": f"http://{name}:8740", "roles": ["cache"], "version": "t", "started": started,
            "info": {"cache": {"free_bytes": 1}}}


def seed(interval: float = 10.0, events: list[tuple[str, str]] | None = None) -> tuple[Pool, FakeClock]:
    """A seed's pool (expiry: three intervals); ``events`` collects (join or leave, member) as components see them."""
    clock, said = FakeClock(), events if events is not None else []
    me = Member("seed", "http://seed:8740", ["locator"], "t", 1.0)
    return Pool(me, [], client=None, interval=interval, expiry=3 * interval,  # type: ignore[arg-type]
                on_join=lambda m: said.append(("join", m.name)), on_leave=lambda m: said.append(("leave", m.name)),
                clock=clock), clock


def names(answer: bytes) -> list[str]:
    return [m["name"] for m in json.loads(answer)["members"]]


def test_heartbeats_within_the_ttl_share_one_encoded_list_whose_ages_err_by_at_most_the_ttl():
    pool, clock = seed(interval=10.0)
    first = pool.receive_json(beat("a"))
    pool.receive_json(beat("b"))  # b joined: a new list
    clock.advance(0.5)
    again = pool.receive_json(beat("a"))
    assert again is pool.receive_json(beat("a"))  # within the ttl: not built again, the same bytes
    assert again is not first
    age_b = next(m["age"] for m in json.loads(again)["members"] if m["name"] == "b")
    assert 0.5 - pool.answer_ttl <= age_b <= 0.5  # b was last heard 0.5 s ago: the list errs young by <= ttl
    clock.advance(pool.answer_ttl)
    fresh = pool.receive_json(beat("a"))
    assert fresh is not again and names(fresh) == ["a", "b", "seed"]
    assert next(m["age"] for m in json.loads(fresh)["members"] if m["name"] == "b") == round(0.5 + pool.answer_ttl, 3)


def test_a_join_a_restart_and_a_departure_make_a_new_list_at_once():
    pool, clock = seed(interval=10.0)
    pool.receive_json(beat("a"))
    assert names(pool.receive_json(beat("b"))) == ["a", "b", "seed"]  # b joined: listed in its own answer
    clock.advance(0.01)
    restarted = pool.receive_json(beat("a", started=2.0))
    assert next(m["started"] for m in json.loads(restarted)["members"] if m["name"] == "a") == 2.0
    clock.advance(25)  # b stays silent past the expiry (30 s) once a heartbeats again at 31 s
    pool.receive_json(beat("a", started=2.0))
    clock.advance(6)
    pool.expire()
    assert names(pool.receive_json(beat("a", started=2.0))) == ["a", "seed"]


def test_the_ttl_follows_the_interval():
    assert seed(interval=2.0)[0].answer_ttl == 0.2
    assert seed(interval=30.0)[0].answer_ttl == 1.0


def test_a_member_stays_while_it_heartbeats_and_leaves_once_silent_for_longer_than_the_expiry():
    events: list[tuple[str, str]] = []
    pool, clock = seed(interval=10.0, events=events)
    for _ in range(6):  # a minute of heartbeats, one every interval
        pool.receive_json(beat("a"))
        clock.advance(10.0)
        assert pool.expire() == []
    assert events == [("join", "a")]
    clock.advance(20.0)  # silent for exactly the expiry (three intervals): still a member
    assert [m.name for m in pool.members()] == ["seed", "a"]
    clock.advance(0.01)
    assert [m.name for m in pool.members()] == ["seed"]  # members() expires it, and the components are told
    assert events == [("join", "a"), ("leave", "a")]
    pool.receive_json(beat("a"))
    assert events[-1] == ("join", "a")


def test_a_member_learned_through_a_seed_counts_the_age_the_seed_gave():
    pool, clock = seed(interval=10.0)
    pool.merge([MemberInfo(name="b", url="http://b:8740", roles=["cache"], version="t", started=1.0, age=25.0),
                MemberInfo(name="old", url="http://old:8740", roles=["cache"], version="t", started=1.0, age=30.0)])
    assert [m["name"] for m in pool.snapshot()] == ["b", "seed"]  # an age past the expiry is not taken in
    assert next(m["age"] for m in pool.snapshot() if m["name"] == "b") == 25.0
    clock.advance(5.0)
    assert pool.expire() == []
    clock.advance(0.01)
    assert [m.name for m in pool.expire()] == ["b"]


def test_a_restart_is_a_departure_then_a_join():
    events: list[tuple[str, str]] = []
    pool, clock = seed(events=events)
    pool.receive_json(beat("a", started=1.0))
    clock.advance(1.0)
    pool.receive_json(beat("a", started=5.0))
    assert events == [("join", "a"), ("leave", "a"), ("join", "a")]
