"""The answer examples of the REST reference (``Route(example=...)``) against what a real node answers."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

from htda.node.rest import API, Route
from htda.protocol import cache, coordinator, dashboard, locator, node
from htda.protocol.base import Answer, ProtocolError, check_answer, decode

# What an operator reads first: each of these must show an example answer.
OPERATORS_READ = {("GET", "/healthz"), ("GET", f"{API}/node"), ("GET", f"{API}/pool"),
                  ("GET", f"{API}/coordinator/files/top"), ("GET", f"{API}/coordinator/nodes"),
                  ("POST", f"{API}/locator/lookup"), ("GET", f"{API}/cache/files"), ("GET", f"{API}/cache/devices"),
                  ("GET", f"{API}/cache/staging")}

# The request body of each POST with an example, made from the example (so a lookup asks for its LFNs).
_SELF = ("name", "url", "roles", "version", "started")
BODIES = {f"{API}/locator/lookup": lambda example: {"lfns": list(example["files"])},
          # the node's own heartbeat and an empty delta of its own holdings: they change nothing
          f"{API}/pool/heartbeat": lambda example: {k: example["members"][0][k] for k in _SELF},
          f"{API}/locator/holdings": lambda example: {"node": "all-in-one", "files": [], "replace": False},
          f"{API}/coordinator/jobs": lambda example: {"jobs": [
              {"job_id": "example#1.0", "owner": "alice", "inputs": ["/store/demo/dataset1/events_001.root"]}]},
          f"{API}/coordinator/events": lambda example: {"events": [
              {"job_id": "example#1.0", "state": "finished", "time": 1795642845.0}]}}


def shape_problems(example: Any, answer: Any, where: str = "") -> list[str]:
    """Where ``example`` and ``answer`` differ in shape: other keys in an object, an object or list where the
    other has none, a list the example fills that the answer leaves empty.  Values are not compared."""
    here = where or "the answer"
    if isinstance(example, dict) and isinstance(answer, dict):
        problems = []
        if set(example) != set(answer):
            problems.append(f"{here}: only the example has {sorted(set(example) - set(answer))}, "
                            f"only the answer has {sorted(set(answer) - set(example))}")
        for key in sorted(set(example) & set(answer)):
            problems += shape_problems(example[key], answer[key], f"{where}/{key}")
        return problems
    if isinstance(example, list) and isinstance(answer, list):
        if example and not answer:
            return [f"{here}: the example lists items, the answer none (give the fixture some)"]
        return shape_problems(example[0], answer[0], f"{where}[0]") if example else []
    structured = (dict, list)
    if isinstance(example, structured) or isinstance(answer, structured) and example is not None:
        return [f"{here}: the example has {type(example).__name__}, the answer {type(answer).__name__}"]
    return []


def _url(node, route: Route) -> str:
    """The route's path with each parameter taken from its example (``{lfn}``: the example's ``lfn``)."""
    path = re.sub(r"\{([^}:]+)(:[^}]*)?\}", lambda m: quote(route.example[m.group(1)].lstrip("/"), safe="/"),
                  route.path)
    return node.url + path


def _answer(node, route: Route) -> Any:
    if route.method == "GET":
        return node.client.get(_url(node, route))
    assert route.path in BODIES, f"{route.method} {route.path} has an example: say in BODIES what to send it"
    return node.client.post(_url(node, route), BODIES[route.path](route.example))


def test_every_example_has_the_shape_of_the_real_answer(cached_node):
    with_examples = [r for r in cached_node.app.routes if r.example is not None]
    assert OPERATORS_READ <= {(r.method, re.sub(r"\{([^}:]+)(:[^}]*)?\}", r"{\1}", r.path)) for r in with_examples}
    problems = [f"{r.method} {r.path}: {problem}" for r in with_examples
                for problem in shape_problems(r.example, _answer(cached_node, r))]
    assert not problems, "\n".join(problems)


def test_examples_and_real_answers_fit_the_answer_types(cached_node):
    """The protocol's answer types (the schemas of the OpenAPI document) describe what the node really sends."""
    with_examples = [r for r in cached_node.app.routes if r.example is not None]
    assert all(r.response is not None for r in with_examples)
    for route in with_examples:
        check_answer(route.example, route.response, f"{route.path} example")
        check_answer(_answer(cached_node, route), route.response, f"{route.path} answer")
    for route in cached_node.app.routes:  # every JSON GET without parameters answers as its type says
        if route.method == "GET" and route.response is not None and not route.params:
            check_answer(cached_node.client.get(cached_node.url + route.path), route.response, route.path)


def test_examples_are_in_the_openapi_document(cached_node):
    doc = cached_node.client.get(f"{cached_node.url}{API}/openapi.json")
    example = doc["paths"][f"{API}/cache/staging"]["get"]["responses"]["200"]["content"]["application/json"]
    assert example["example"]["failed"][0]["lfn"] == "/store/demo/dataset2/events_001.root"
    route = next(r for r in cached_node.app.routes if r.path == "/healthz")
    assert doc["paths"]["/healthz"]["get"]["responses"]["200"]["content"]["application/json"]["example"] \
        == route.example


def test_shape_problems_name_the_place():
    assert shape_problems({"a": [{"b": 1}], "c": 2}, {"a": [{"b": 2, "d": 3}], "c": None}) == [
        "/a[0]: only the example has [], only the answer has ['d']"]
    assert shape_problems({"a": [{"b": 1}]}, {"a": []}) == [
        "/a: the example lists items, the answer none (give the fixture some)"]
    assert shape_problems({"a": {"b": 1}}, {"a": 5}) == ["/a: the example has dict, the answer int"]
    assert shape_problems({"n": None}, {"n": {"x": 1}}) == []  # a null in the example stands for any value


def test_every_request_example_is_accepted_by_its_type_and_every_post_shows_an_answer(cached_node):
    """A reader who copies a request from the reference sends what the node decodes, and sees what comes back."""
    doc = cached_node.client.get(f"{cached_node.url}{API}/openapi.json")
    with_bodies = [r for r in cached_node.app.routes if r.body is not None]
    assert {r.path for r in with_bodies} >= {f"{API}/coordinator/jobs", f"{API}/cache/evict", f"{API}/pool/heartbeat"}
    for route in with_bodies:
        example = route.body.example
        assert example is not None, f"{route.path}: its request type {route.body.__name__} has no example"
        decode(json.dumps(example).encode(), route.body, f"{route.path} example")
        operation = doc["paths"][re.sub(r"\{([^}:]+)(:[^}]*)?\}", r"{\1}", route.path)][route.method.lower()]
        assert operation["requestBody"]["content"]["application/json"]["example"] == example
        assert "example" in operation["responses"]["200"]["content"]["application/json"], route.path


def test_answer_examples_of_the_types_fit_them():
    answers = {kind for module in (cache, coordinator, dashboard, locator, node) for kind in vars(module).values()
               if isinstance(kind, type) and issubclass(kind, Answer) and kind.example is not None}
    assert {cache.EvictAnswer, cache.ViewInfo, coordinator.DrainAnswer} <= answers
    for kind in answers:
        check_answer(kind.example, kind, f"{kind.__name__}.example")
    try:
        check_answer({**cache.EvictAnswer.example, "evicted": "one"}, cache.EvictAnswer)
    except ProtocolError as exc:
        assert "evicted" in str(exc)
    else:
        raise AssertionError("a wrong example passed its type's check")
