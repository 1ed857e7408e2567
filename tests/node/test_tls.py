"""HTTPS is one config switch: a pool over TLS with generated certificates, optionally client-verified."""

import pytest

from htda.node.client import Client, ClientError, ConnectError, HTTPStatusError
from htda.testing.certs import make_ca, make_cert
from htda.testing.nodes import wait_until


@pytest.fixture
def pki(tmp_path):
    ca = make_ca(tmp_path)
    for name in ("seed", "worker", "admin"):
        make_cert(tmp_path, name, ca)
    return tmp_path


def tls_section(name, verify_clients=False):
    return {"tls": {"enabled": True, "certificate": f"{name}.pem", "private_key": f"{name}.key",
                    "ca_file": "ca.pem", "verify_clients": verify_clients}}


def test_https_pool_forms_and_plain_http_is_refused(node_factory, pki):
    seed = node_factory("seed", ["locator"], sections=tls_section("seed"), scheme="https")
    worker = node_factory("worker", ["cache"], seeds=[seed.url], sections=tls_section("worker"), scheme="https")
    assert seed.url.startswith("https://") and worker.url.startswith("https://")
    wait_until(lambda: seed.members() == {"seed", "worker"} == worker.members(), timeout=10, what="TLS pool")
    with pytest.raises(ClientError):
        Client(retries=0).get(seed.url.replace("https://", "http://") + "/healthz", timeout=2)
    with pytest.raises(ConnectError):  # no CA: the self-made certificate is not trusted
        Client(retries=0).get(seed.url + "/healthz", timeout=2)


def test_client_certificates_are_required_and_authenticate(node_factory, pki):
    seed = node_factory("seed", ["locator"], sections=tls_section("seed", verify_clients=True), scheme="https")
    ca = str(pki / "ca.pem")
    with pytest.raises(ConnectError):
        Client(retries=0, ca_file=ca).get(seed.url + "/healthz", timeout=2)
    admin = Client(None, retries=0, ca_file=ca, client_cert=str(pki / "admin.pem"), client_key=str(pki / "admin.key"))
    beat = {"name": "cert-only", "url": "https://127.0.0.1:9", "roles": [], "version": "t", "started": 1.0}
    answer = admin.post(seed.url + "/api/v1/pool/heartbeat", beat)  # no secret: the certificate is the credential
    assert "cert-only" in {m["name"] for m in answer["members"]}


def test_without_client_verification_a_certificate_alone_is_not_enough(node_factory, pki):
    seed = node_factory("seed", ["locator"], sections=tls_section("seed"), scheme="https")
    admin = Client(None, retries=0, ca_file=str(pki / "ca.pem"), client_cert=str(pki / "admin.pem"),
                   client_key=str(pki / "admin.key"))
    with pytest.raises(HTTPStatusError) as err:
        admin.post(seed.url + "/api/v1/pool/heartbeat",
                   {"name": "x", "url": "https://127.0.0.1:9", "roles": [], "version": "t", "started": 1.0})
    assert err.value.status == 401
