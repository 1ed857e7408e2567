"""The dashboard in a real headless Chromium: it loads, shows a live pool, and follows it."""

from __future__ import annotations

import pytest

from testkit.nodes import wait_until

from .browser import Browser, chromium_binary

pytestmark = pytest.mark.skipif(chromium_binary() is None,
                                reason="Chromium missing (apt-get install chromium chromium-driver)")
pytest.importorskip("websocket", reason="websocket-client missing (pip install websocket-client)")

MEMBER_NAMES = "[...document.querySelectorAll('#members tbody tr[data-node]')].map(r => r.dataset.node)"


def _cache(capacity: int) -> dict:
    # high_watermark 1: the heartbeat's capacity is what the node may fill, here all of the device
    device = {"path": f"cache-{capacity}", "capacity": capacity, "high_watermark": 1.0, "low_watermark": 1.0}
    return {"cache": {"devices": [device], "cycle": 60.0}}


@pytest.fixture
def browser(tmp_path):
    opened = []

    def open_page(url: str) -> Browser:
        opened.append(Browser(url, tmp_path / "chromium"))
        return opened[-1]

    yield open_page
    for page in opened:
        page.close()


def test_dashboard_shows_the_pool_and_a_node_joining(inprocess_node, browser):
    service = inprocess_node("service", ["coordinator", "locator", "dashboard"],
                             sections={"dashboard": {"refresh": 1.0}})
    inprocess_node("worker1", ["cache"], seeds=[service.url], sections=_cache(48 << 20))
    wait_until(lambda: service.pool.member("worker1"), what="worker1 to join")

    page = browser(f"{service.url}/dashboard")
    names = wait_until(lambda: set(page.evaluate(MEMBER_NAMES) or ()) == {"service", "worker1"}
                       and page.evaluate(MEMBER_NAMES), timeout=20, what="the page to list the pool")
    assert sorted(names) == ["service", "worker1"]
    assert page.evaluate("document.title") == "HTDA pool"
    assert page.evaluate("document.getElementById('status').className") == "status ok"
    worker_row = page.evaluate("document.querySelector('#members tr[data-node=worker1]').innerText")
    assert "48.0 MiB" in worker_row and "cache" in worker_row
    assert page.evaluate("document.getElementById('total-caches').textContent") == "1"
    assert page.evaluate("document.querySelector('#top-source').textContent") == "(from service)"

    inprocess_node("worker2", ["cache"], seeds=[service.url], sections=_cache(16 << 20))
    wait_until(lambda: "worker2" in page.evaluate(MEMBER_NAMES), timeout=20, what="the page to show worker2")
    assert page.evaluate("document.getElementById('total-caches').textContent") == "2"
    assert "16.0 MiB" in page.evaluate("document.querySelector('#members tr[data-node=worker2]').innerText")


def test_dashboard_reports_a_lost_node(inprocess_node, browser):
    service = inprocess_node("lonely", ["dashboard"], sections={"dashboard": {"refresh": 1.0}})
    page = browser(f"{service.url}/dashboard")
    wait_until(lambda: page.evaluate(MEMBER_NAMES) == ["lonely"], timeout=20, what="the page to load")
    service.stop()
    wait_until(lambda: "cannot reach the node" in page.evaluate("document.getElementById('status').textContent"),
               timeout=20, what="the page to show the lost connection")
