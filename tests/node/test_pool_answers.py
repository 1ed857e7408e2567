"""The seed's member-list answer (:meth:`htda.node.pool.Pool.receive_json`) on an injected clock."""

from __future__ import annotations

import json

from htda.node.pool import Member, Pool


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def beat(name: str, started: float = 1.0) -> dict:
    return {"name": name, "url": f"http://{name}:8740", "roles": ["cache"], "version": "t", "started": started,
            "info": {"cache": {"free_bytes": 1}}}


def seed(interval: float = 10.0) -> tuple[Pool, Clock]:
    clock = Clock()
    me = Member("seed", "http://seed:8740", ["locator"], "t", 1.0)
    return Pool(me, [], client=None, interval=interval, expiry=3 * interval, clock=clock), clock  # type: ignore[arg-type]


def names(answer: bytes) -> list[str]:
    return [m["name"] for m in json.loads(answer)["members"]]


def test_heartbeats_within_the_ttl_share_one_encoded_list_whose_ages_err_by_at_most_the_ttl():
    pool, clock = seed(interval=10.0)
    first = pool.receive_json(beat("a"))
    pool.receive_json(beat("b"))  # b joined: a new list
    clock.now += 0.5
    again = pool.receive_json(beat("a"))
    assert again is pool.receive_json(beat("a"))  # within the ttl: not built again, the same bytes
    assert again is not first
    age_b = next(m["age"] for m in json.loads(again)["members"] if m["name"] == "b")
    assert 0.5 - pool.answer_ttl <= age_b <= 0.5  # b was last heard 0.5 s ago: the list errs young by <= ttl
    clock.now += pool.answer_ttl
    fresh = pool.receive_json(beat("a"))
    assert fresh is not again and names(fresh) == ["a", "b", "seed"]
    assert next(m["age"] for m in json.loads(fresh)["members"] if m["name"] == "b") == round(0.5 + pool.answer_ttl, 3)


def test_a_join_a_restart_and_a_departure_make_a_new_list_at_once():
    pool, clock = seed(interval=10.0)
    pool.receive_json(beat("a"))
    assert names(pool.receive_json(beat("b"))) == ["a", "b", "seed"]  # b joined: listed in its own answer
    clock.now += 0.01
    restarted = pool.receive_json(beat("a", started=2.0))
    assert next(m["started"] for m in json.loads(restarted)["members"] if m["name"] == "a") == 2.0
    clock.now += 25  # b stays silent past the expiry (30 s) once a heartbeats again at 31 s
    pool.receive_json(beat("a", started=2.0))
    clock.now += 6
    pool.expire()
    assert names(pool.receive_json(beat("a", started=2.0))) == ["a", "seed"]


def test_the_ttl_follows_the_interval():
    assert seed(interval=2.0)[0].answer_ttl == 0.2
    assert seed(interval=30.0)[0].answer_ttl == 1.0
