from htda.node.client import Client
from htda.testing.nodes import SECRET


def test_inprocess_node_answers(inprocess_node):
    node = inprocess_node("solo", ["coordinator", "locator", "cache"])
    client = Client(SECRET.encode())
    assert client.get(f"{node.url}/api/v1/node")["roles"] == ["coordinator", "locator", "cache"]


def test_subprocess_node_answers(node_factory):
    node = node_factory("sub", ["locator"])
    assert node.get("/healthz") == {"status": "ok", "name": "sub"}
