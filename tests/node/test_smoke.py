import pytest

from htda.cli import main
from htda.node.client import Client, HTTPStatusError
from testkit.nodes import SECRET


def test_inprocess_node_answers(inprocess_node):
    node = inprocess_node("solo", ["coordinator", "locator", "cache"])
    client = Client(SECRET.encode())
    assert client.get(f"{node.url}/api/v1/node")["roles"] == ["coordinator", "locator", "cache"]


def test_subprocess_node_answers(node_factory):
    node = node_factory("sub", ["locator"])
    health = node.get("/healthz")
    assert health["status"] == "ok" and health["name"] == "sub" and health["problems"] == []
    assert health["loops"]["htda-locator-sweep"]["state"] == "ok"


def test_healthz_answers_503_naming_a_loop_that_stopped_and_status_shows_it(inprocess_node, capsys):
    node = inprocess_node("sick", ["locator"])
    client = Client(SECRET.encode())
    assert client.get(f"{node.url}/healthz")["status"] == "ok"
    node.components["locator"].stop()  # its sweep thread ends; the REST server goes on answering
    with pytest.raises(HTTPStatusError) as refused:
        client.get(f"{node.url}/healthz")
    assert refused.value.status == 503
    assert refused.value.payload["problems"] == ["htda-locator-sweep: stopped (not running)"]
    assert main(["--url", node.url, "status"]) == 0
    assert "UNHEALTHY: htda-locator-sweep: stopped (not running)" in capsys.readouterr().out
