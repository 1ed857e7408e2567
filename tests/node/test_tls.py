"""HTTPS is one config switch: a pool over TLS with generated certificates, optionally client-verified."""

import pytest

from htda.node.auth import CertificatePolicy
from htda.node.client import Client, ConnectError, HTTPStatusError
from htda.node.config import ConfigError
from htda.node.runtime import load_config
from testkit.certs import make_ca, make_cert
from testkit.nodes import free_port, wait_until, write_config

MEMBERS = ["cn:seed", "cn:worker", "dns:*.workers.test"]


@pytest.fixture
def pki(tmp_path):
    ca = make_ca(tmp_path)
    for name in ("seed", "worker", "admin"):
        make_cert(tmp_path, name, ca)
    make_cert(tmp_path, "w17", ca, dns_names=("w17.workers.test",))
    make_cert(tmp_path, "intruder", ca, dns_names=("intruder.elsewhere.test",))
    return tmp_path


def tls_section(name, verify_clients=False, allowed=None):
    tls = {"enabled": True, "certificate": f"{name}.pem", "private_key": f"{name}.key", "ca_file": "ca.pem",
           "verify_clients": verify_clients}
    if verify_clients:
        tls["allowed_clients"] = MEMBERS if allowed is None else allowed
    return {"tls": tls}


def cert_client(pki, name):
    return Client(None, retries=0, connect_timeout=PATIENT, timeout=PATIENT, ca_file=str(pki / "ca.pem"),
                  client_cert=str(pki / f"{name}.pem"), client_key=str(pki / f"{name}.key"))


# What these tests check is how a request fails (a plain request dropped, a certificate refused), not how fast:
# a loaded CI machine may stall a node for seconds, and a timeout must not stand in for (or hide) a refusal.
PATIENT = 20.0

BEAT = {"name": "cert-only", "url": "https://127.0.0.1:9", "roles": [], "version": "t", "started": 1.0}


def test_https_pool_forms_and_plain_http_is_refused(node_factory, pki):
    seed = node_factory("seed", ["locator"], sections=tls_section("seed"), scheme="https")
    worker = node_factory("worker", ["cache"], seeds=[seed.url], sections=tls_section("worker"), scheme="https")
    assert seed.url.startswith("https://") and worker.url.startswith("https://")
    wait_until(lambda: seed.members() == {"seed", "worker"} == worker.members(), timeout=10, what="TLS pool")
    patient = Client(retries=0, connect_timeout=PATIENT, timeout=PATIENT)
    with pytest.raises(ConnectError):
        patient.get(seed.url.replace("https://", "http://") + "/healthz")
    with pytest.raises(ConnectError):  # no CA: the self-made certificate is not trusted
        patient.get(seed.url + "/healthz")


def test_client_certificates_are_required_and_authenticate(node_factory, pki):
    seed = node_factory("seed", ["locator"], sections=tls_section("seed", True, ["cn:seed", "cn:admin"]),
                        scheme="https")
    with pytest.raises(ConnectError):
        Client(retries=0, connect_timeout=PATIENT, ca_file=str(pki / "ca.pem")).get(seed.url + "/healthz")
    answer = cert_client(pki, "admin").post(seed.url + "/api/v1/pool/heartbeat", BEAT)  # no secret: the certificate
    assert "cert-only" in {m["name"] for m in answer["members"]}  # is the credential


def test_a_certificate_of_the_ca_that_is_not_on_the_allow_list_is_refused(node_factory, pki):
    seed = node_factory("seed", ["locator"], sections=tls_section("seed", True), scheme="https")
    node_factory("worker", ["cache"], seeds=[seed.url], sections=tls_section("worker", True), scheme="https")
    wait_until(lambda: seed.members() == {"seed", "worker"}, timeout=10, what="the listed worker to join")
    assert cert_client(pki, "w17").post(seed.url + "/api/v1/pool/heartbeat", BEAT)  # dns:*.workers.test
    for outsider in ("admin", "intruder"):  # signed by the same CA, but on no list
        with pytest.raises(ConnectError):
            cert_client(pki, outsider).post(seed.url + "/api/v1/pool/heartbeat", {**BEAT, "name": outsider})
        with pytest.raises(ConnectError):  # not even public routes: the connection ends after the handshake
            cert_client(pki, outsider).get(seed.url + "/healthz")
    assert seed.members() == {"seed", "worker", "cert-only"}
    assert "refused a client certificate from 127.0.0.1: cn=intruder is not in tls.allowed_clients" in \
        seed.log.read_text()


def peer(cn, *dns, org=None):
    subject = ([(("organizationName", org),)] if org else []) + [(("commonName", cn),)]
    return {"subject": tuple(subject), "subjectAltName": tuple(("DNS", d) for d in dns)}


def test_certificate_patterns_match_common_names_dns_names_and_whole_subjects():
    policy = CertificatePolicy(["cn:seed", "dns:*.workers.test", "dn:CN=admin,O=Physics"])
    assert policy.allows(peer("seed")) and policy.allows(peer("SEED"))
    assert policy.allows(peer("anything", "w1.workers.test"))
    assert not policy.allows(peer("w1.workers.test"))  # a CN is not a DNS name
    assert not policy.allows(peer("x", "w1.workers.test.evil.org", "workers.test"))
    assert policy.allows(peer("admin", org="Physics")) and not policy.allows(peer("admin", org="Chemistry"))
    assert not policy.allows(None) and not CertificatePolicy([]).allows(peer("seed"))


@pytest.mark.parametrize("tls, message", [
    ({"verify_clients": True}, "'tls.allowed_clients' is required when tls.verify_clients is true"),
    ({"verify_clients": True, "allowed_clients": ["seed"]}, "'tls.allowed_clients' entry 'seed': must start with"),
    ({"verify_clients": True, "allowed_clients": ["cn:"]}, "empty pattern"),
    ({"verify_clients": True, "allowed_clients": ["dns:w[0-9].test"]}, "only * and ? are wildcards"),
    ({"allowed_clients": ["cn:seed"]}, "has no effect unless tls.verify_clients is true"),
])
def test_the_allow_list_is_checked_at_start_up(tmp_path, tls, message):
    port = free_port()
    section = {"enabled": True, "certificate": "c.pem", "private_key": "c.key", "ca_file": "ca.pem", **tls}
    config = write_config(tmp_path, "n", ["locator"], port, [], sections={"tls": section})
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert message in str(err.value) and str(config) in str(err.value)


def test_without_client_verification_a_certificate_alone_is_not_enough(node_factory, pki):
    seed = node_factory("seed", ["locator"], sections=tls_section("seed"), scheme="https")
    admin = Client(None, retries=0, ca_file=str(pki / "ca.pem"), client_cert=str(pki / "admin.pem"),
                   client_key=str(pki / "admin.key"))
    with pytest.raises(HTTPStatusError) as err:
        admin.post(seed.url + "/api/v1/pool/heartbeat",
                   {"name": "x", "url": "https://127.0.0.1:9", "roles": [], "version": "t", "started": 1.0})
    assert err.value.status == 401
