"""Schemathesis fuzzing of every endpoint an all-in-one node serves (its own OpenAPI document).

Signed requests, valid and invalid by the schemas, must never get a 5xx nor
crash the node; unsigned ones must get 401 wherever the document asks for a
signature (the node allows no unsigned read network here).
"""

from __future__ import annotations

import json
from urllib.parse import urlencode, urlsplit

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis missing (pip install schemathesis)")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from .helpers import ALL_ROLES, Raw, start_node, unhandled_errors  # noqa: E402

EXAMPLES = 25  # per operation and generation mode: about a minute for the whole document on 2 cores


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    node = start_node(tmp_path_factory.mktemp("fuzz"), "fuzz", ALL_ROLES, read_networks=[],
                      sections={"cache": {"cycle": 3600.0}, "coordinator": {}})
    raw = Raw(node.url)
    status, document = raw.send("GET", "/api/v1/openapi.json", sign=False)
    assert status == 200
    yield node, raw, document
    raw.close()
    node.stop()


def _request(case) -> tuple[str, str, bytes]:
    kwargs = case.as_transport_kwargs(base_url="http://fuzz")
    parts = urlsplit(kwargs["url"])
    target = parts.path + ("?" + urlencode(kwargs["params"], doseq=True) if kwargs.get("params") else "")
    body = json.dumps(kwargs["json"]).encode() if "json" in kwargs else b""
    return case.method.upper(), target, body


def _operations(document: dict):
    schema = schemathesis.openapi.from_dict(document)
    for result in schema.get_all_operations():
        yield result.ok()


@pytest.mark.slow
def test_fuzz_every_endpoint_signed(target):
    node, raw, document = target
    failures: list[str] = []
    tried = 0

    for operation in _operations(document):
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck), phases=[Phase.generate])
            def fuzz(case) -> None:
                nonlocal tried
                method, path, body = _request(case)
                status, answer = raw.send(method, path, body)
                tried += 1
                if status >= 500:
                    failures.append(f"{method} {path[:120]} body={body[:200]!r} -> {status} {str(answer)[:200]}")

            try:
                fuzz()
            except Exception as exc:  # noqa: BLE001 - unsatisfiable negative schemas: nothing to send
                if "Unsatisfiable" not in type(exc).__name__ and "unsatisfiable" not in str(exc).lower():
                    raise
    print(f"fuzzed {tried} signed requests")
    assert tried > 100
    assert not failures, "\n".join(failures[:20])
    assert node.proc.poll() is None, "the node died"
    assert raw.send("GET", "/healthz", sign=False)[0] == 200
    assert not unhandled_errors(node)


def test_unsigned_requests_are_refused(target):
    """Every operation with a security requirement answers 401 to a valid but unsigned request."""
    node, raw, document = target
    guarded = 0
    for operation in _operations(document):
        op = document["paths"][operation.path][operation.method.lower()]
        if not op.get("security"):
            continue

        @given(case=operation.as_strategy())
        @settings(max_examples=2, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate])
        def unsigned(case) -> None:
            method, path, body = _request(case)
            status, answer = raw.send(method, path, body, sign=False)
            assert status == 401, f"{method} {path} answered {status} unsigned: {answer}"

        unsigned()
        guarded += 1
    state_changing = [(p, m) for p, ops in document["paths"].items() for m in ops if m != "get"]
    assert guarded >= len(state_changing) > 5
