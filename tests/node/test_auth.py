"""Trust: signed requests are accepted once; anything else is refused and changes nothing."""

import time

import pytest

from htda.node.auth import AuthError, Signer, Verifier
from htda.node.client import Client, HTTPStatusError
from htda.testing.nodes import SECRET

KEY = SECRET.encode()


def beat(name):
    return {"name": name, "url": "http://127.0.0.1:9", "roles": ["cache"], "version": "t", "started": 1.0}


def test_verifier_accepts_a_good_signature_once():
    signer, verifier = Signer(KEY), Verifier(KEY)
    header = signer.header("POST", "/api/v1/x?a=1", b"{}")
    verifier.verify("POST", "/api/v1/x?a=1", header, b"{}")
    with pytest.raises(AuthError, match="replayed"):
        verifier.verify("POST", "/api/v1/x?a=1", header, b"{}")


@pytest.mark.parametrize("method,target,body", [("GET", "/api/v1/x?a=1", b"{}"), ("POST", "/api/v1/y?a=1", b"{}"),
                                                ("POST", "/api/v1/x?a=2", b"{}"), ("POST", "/api/v1/x?a=1", b"{ }")])
def test_signature_covers_method_target_and_body(method, target, body):
    header = Signer(KEY).header("POST", "/api/v1/x?a=1", b"{}")
    with pytest.raises(AuthError, match="bad signature"):
        Verifier(KEY).verify(method, target, header, body)


def test_stale_and_future_timestamps_are_refused():
    verifier = Verifier(KEY, window=30)
    for skew in (-31, 31):
        header = Signer(KEY).header("POST", "/p", b"", now=time.time() + skew)
        with pytest.raises(AuthError, match="stale"):
            verifier.verify("POST", "/p", header, b"")


@pytest.mark.parametrize("header", [None, "", "Basic abc", "HTDA-HMAC ts=x,nonce=1,sig=2", "HTDA-HMAC garbage"])
def test_malformed_headers_are_refused(header):
    with pytest.raises(AuthError):
        Verifier(KEY).verify("POST", "/p", header, b"")


def test_nonce_memory_is_bounded():
    verifier = Verifier(KEY, max_nonces=100)
    for _ in range(1000):
        verifier.verify("POST", "/p", Signer(KEY).header("POST", "/p"), b"")
    assert len(verifier._seen) <= 100


@pytest.fixture
def node(inprocess_node):
    return inprocess_node("auth-node", ["locator"])


def members(node):
    return {m.name for m in node.pool.members()}


@pytest.mark.parametrize("secret", [None, b"another-secret-of-enough-length"])
def test_unsigned_or_wrongly_signed_heartbeat_is_refused_and_changes_nothing(node, secret):
    client = Client(secret, retries=0)
    with pytest.raises(HTTPStatusError) as err:
        client.post(f"{node.url}/api/v1/pool/heartbeat", beat("intruder"))
    assert err.value.status == 401
    assert members(node) == {"auth-node"}


def test_stale_heartbeat_is_refused(node):
    client = Client(retries=0)
    body = b'{"name":"late","url":"http://127.0.0.1:9","roles":[],"version":"t","started":1}'
    header = Signer(KEY).header("POST", "/api/v1/pool/heartbeat", body, now=time.time() - 3600)
    status, answer = client.raw("POST", f"{node.url}/api/v1/pool/heartbeat", body,
                                [f"Authorization: {header}", "Content-Type: application/json"])
    assert status == 401 and b"stale" in answer
    assert members(node) == {"auth-node"}


def test_replayed_heartbeat_is_refused(node):
    client = Client(retries=0)
    body = b'{"name":"once","url":"http://127.0.0.1:9","roles":[],"version":"t","started":1}'
    header = Signer(KEY).header("POST", "/api/v1/pool/heartbeat", body)
    headers = [f"Authorization: {header}", "Content-Type: application/json"]
    assert client.raw("POST", f"{node.url}/api/v1/pool/heartbeat", body, headers)[0] == 200
    assert "once" in members(node)
    node.pool._members.clear()
    status, answer = client.raw("POST", f"{node.url}/api/v1/pool/heartbeat", body, headers)
    assert status == 401 and b"replayed" in answer
    assert members(node) == {"auth-node"}


def test_signed_heartbeat_is_accepted(node):
    answer = Client(KEY).post(f"{node.url}/api/v1/pool/heartbeat", beat("friend"))
    assert {m["name"] for m in answer["members"]} == {"auth-node", "friend"}


def test_reads_need_a_signature_outside_the_read_networks(node):
    node.app.read_networks = []
    with pytest.raises(HTTPStatusError) as err:
        Client(retries=0).get(f"{node.url}/api/v1/pool")
    assert err.value.status == 401
    assert Client(KEY).get(f"{node.url}/api/v1/pool")["self"] == "auth-node"
    assert Client(retries=0).get(f"{node.url}/api/v1/node")["name"] == "auth-node"  # public
