"""Trust: signed requests are accepted once; anything else is refused and changes nothing."""

import re
import socket
import time

import pytest

from htda.node.auth import AuthError, Signer, Verifier, authority, body_hash, check_body, request_target
from htda.node.client import Client, HTTPStatusError
from htda.node.rest import receiver_names
from testkit.http import raw as raw_request
from testkit.nodes import SECRET

KEY = SECRET.encode()


def beat(name):
    return {"name": name, "url": "http://127.0.0.1:9", "roles": ["cache"], "version": "t", "started": 1.0}


ME = "node-a:8740"
ME_SET = {ME}


def test_verifier_accepts_a_good_signature_once():
    signer, verifier = Signer(KEY), Verifier(KEY)
    header = signer.header("POST", "/api/v1/x?a=1", b"{}", receiver=ME)
    verifier.verify("POST", "/api/v1/x?a=1", header, b"{}", ME_SET)
    with pytest.raises(AuthError, match="replayed"):
        verifier.verify("POST", "/api/v1/x?a=1", header, b"{}", ME_SET)


@pytest.mark.parametrize("method,target,body", [("GET", "/api/v1/x?a=1", b"{}"), ("POST", "/api/v1/y?a=1", b"{}"),
                                                ("POST", "/api/v1/x?a=2", b"{}")])
def test_signature_covers_method_and_target(method, target, body):
    header = Signer(KEY).header("POST", "/api/v1/x?a=1", b"{}", receiver=ME)
    with pytest.raises(AuthError, match="bad signature"):
        Verifier(KEY).verify(method, target, header, body, ME_SET)


def test_the_header_vouches_for_the_body_before_it_is_read():
    header = Signer(KEY).header("POST", "/p", b'{"a":1}', receiver=ME)
    signed_hash = Verifier(KEY).check("POST", "/p", header, ME_SET)  # no body needed to decide
    check_body(signed_hash, b'{"a":1}')
    with pytest.raises(AuthError, match="body does not match"):
        check_body(signed_hash, b'{"a":2}')
    forged = re.sub(r"bodyhash=[0-9a-f]+", "bodyhash=" + body_hash(b'{"a":2}'), header)
    with pytest.raises(AuthError, match="bad signature"):  # the hash itself is signed
        Verifier(KEY).check("POST", "/p", forged, ME_SET)


def test_a_signature_for_another_receiver_is_refused():
    header = Signer(KEY).header("POST", "/p", b"", receiver="node-b:8740")
    with pytest.raises(AuthError, match="signed for node-b:8740, not for this node"):
        Verifier(KEY).check("POST", "/p", header, ME_SET)
    retargeted = header.replace("to=node-b:8740", f"to={ME}")
    with pytest.raises(AuthError, match="bad signature"):  # the receiver is signed: it cannot be edited
        Verifier(KEY).check("POST", "/p", retargeted, ME_SET)


def test_a_header_of_the_old_format_without_receiver_is_refused():
    old = f"HTDA-HMAC ts={int(time.time())},nonce=abc,sig={'0' * 64}"
    with pytest.raises(AuthError, match="names no receiver"):
        Verifier(KEY).check("POST", "/p", old, ME_SET)


@pytest.mark.parametrize("url,expected", [("http://LocalHost:8740/x?y", "localhost:8740"),
                                          ("https://seed.example.org/api", "seed.example.org:443"),
                                          ("http://[::1]:9/", "[::1]:9"), ("http://10.0.0.1/", "10.0.0.1:80")])
def test_signers_name_the_authority_they_call(url, expected):
    assert authority(url) == expected
    header = Signer(KEY).for_url("GET", url)
    assert f"to={expected}," in header
    Verifier(KEY).check("GET", request_target(url), header, {expected})


def test_stale_and_future_timestamps_are_refused():
    verifier = Verifier(KEY, window=30)
    for skew in (-31, 31):
        header = Signer(KEY).header("POST", "/p", b"", now=time.time() + skew, receiver=ME)
        with pytest.raises(AuthError, match="stale"):
            verifier.verify("POST", "/p", header, b"", ME_SET)


@pytest.mark.parametrize("header", [None, "", "Basic abc", "HTDA-HMAC ts=x,nonce=1,sig=2", "HTDA-HMAC garbage",
                                    f"HTDA-HMAC ts=1,nonce=1,to={ME},bodyhash=xyz,sig=2"])
def test_malformed_headers_are_refused(header):
    with pytest.raises(AuthError):
        Verifier(KEY).verify("POST", "/p", header, b"", ME_SET)


def test_nonce_memory_is_bounded():
    verifier = Verifier(KEY, max_nonces=100)
    for _ in range(1000):
        verifier.verify("POST", "/p", Signer(KEY).header("POST", "/p", receiver=ME), b"", ME_SET)
    assert verifier.remembered_nonces <= 100


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
    body = b'{"name":"late","url":"http://127.0.0.1:9","roles":[],"version":"t","started":1}'
    header = Signer(KEY).for_url("POST", f"{node.url}/api/v1/pool/heartbeat", body, now=time.time() - 3600)
    status, answer = raw_request("POST", f"{node.url}/api/v1/pool/heartbeat", body,
                                [f"Authorization: {header}", "Content-Type: application/json"])
    assert status == 401 and b"stale" in answer
    assert members(node) == {"auth-node"}


def test_replayed_heartbeat_is_refused(node):
    body = b'{"name":"once","url":"http://127.0.0.1:9","roles":[],"version":"t","started":1}'
    header = Signer(KEY).for_url("POST", f"{node.url}/api/v1/pool/heartbeat", body)
    headers = [f"Authorization: {header}", "Content-Type: application/json"]
    assert raw_request("POST", f"{node.url}/api/v1/pool/heartbeat", body, headers)[0] == 200
    first_seen = node.pool.member("once").last_seen
    status, answer = raw_request("POST", f"{node.url}/api/v1/pool/heartbeat", body, headers)
    assert status == 401 and b"replayed" in answer
    assert node.pool.member("once").last_seen == first_seen  # the replay did not count as a heartbeat


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


def send_heartbeat(url, header, body):
    return raw_request("POST", f"{url}/api/v1/pool/heartbeat", body,
                                 [f"Authorization: {header}", "Content-Type: application/json"])


def test_a_request_signed_for_one_node_is_refused_by_another(inprocess_node):
    a, b = inprocess_node("node-a", ["locator"]), inprocess_node("node-b", ["locator"])
    body = b'{"name":"forwarded","url":"http://127.0.0.1:9","roles":[],"version":"t","started":1}'
    header = Signer(KEY).for_url("POST", f"{a.url}/api/v1/pool/heartbeat", body)
    status, answer = send_heartbeat(b.url, header, body)
    assert status == 401 and b"not for this node" in answer
    assert members(b) == {"node-b"}
    assert send_heartbeat(a.url, header, body)[0] == 200  # the very same request is good where it was meant to go
    assert "forwarded" in members(a)


def test_a_node_accepts_signatures_for_its_configured_aliases(inprocess_node):
    node = inprocess_node("aliased", ["locator"], sections={"node": {"aliases": ["seed.example.org:443", "seed"]}})
    body = b'{"name":"via-proxy","url":"http://127.0.0.1:9","roles":[],"version":"t","started":1}'
    for receiver in ("seed.example.org:443", f"seed:{node.server.port}"):
        header = Signer(KEY).header("POST", "/api/v1/pool/heartbeat", body, receiver=receiver)
        assert send_heartbeat(node.url, header, body)[0] == 200
    header = Signer(KEY).header("POST", "/api/v1/pool/heartbeat", body, receiver="seed.example.org:8443")
    assert send_heartbeat(node.url, header, body)[0] == 401


@pytest.mark.parametrize("host,names", [
    ("127.0.0.1", {"127.0.0.1:8740", "localhost:8740"}),
    ("localhost", {"localhost:8740", "127.0.0.1:8740", "[::1]:8740"}),
    ("10.1.2.3", {"10.1.2.3:8740"}),  # no loopback name: the node is not listening there
    ("[::1]", {"[::1]:8740", "localhost:8740"}),
])
def test_a_server_answers_to_the_names_of_its_listen_address(host, names):
    assert receiver_names(host, 8740) == names


def test_a_wildcard_listener_answers_to_loopback_and_the_host_names():
    names = receiver_names("0.0.0.0", 8740)
    assert {"127.0.0.1:8740", "[::1]:8740", "localhost:8740", f"{socket.gethostname().lower()}:8740"} <= names
    assert "10.1.2.3:8740" not in names  # other addresses: node.aliases
