"""``htda demo`` against a real node: ROOT files in its storage, jobs through the real translate hook and
submit agent, copies on its cache, and the Rank a new job gets."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from htda.cli import main
from testkit.nodes import free_port, start_inprocess, wait_until, write_config
from tests.condor.kit import shared_dir


@pytest.fixture
def pool(tmp_path):
    """A node with every role the demo needs; its periodic cycles too slow to matter."""
    port = free_port()
    sockets = shared_dir("htda-demo-")  # root's, 0755: the hooks trust the agent's socket only there
    storage = tmp_path / "storage"
    storage.mkdir()
    path = write_config(tmp_path, "demo", ["coordinator", "locator", "cache", "submit", "dashboard"], port,
                        [f"http://127.0.0.1:{port}"], sections={
                            "coordinator": {"cycle": 600.0}, "dashboard": {"refresh": 1.0},
                            "cache": {"storage": "posix", "storage_location": str(storage),
                                      "devices": [{"path": str(tmp_path / "dev0")}], "cycle": 600.0},
                            "submit": {"socket": f"{sockets}/submit.sock", "storage_root": str(storage)}})
    node = start_inprocess(path)
    yield path, storage, node
    node.stop()
    shutil.rmtree(sockets)


def test_demo_caches_the_popular_dataset_and_steers_a_new_job_to_it(pool, capsys):
    path, storage, _ = pool
    code = main(["demo", "--config", str(path), "--datasets", "2", "--files", "2", "--events", "3000", "--jobs", "8",
                 "--wait", "30"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "writing 2 datasets of 2 files" in err and "submitting 8 jobs through the translate hook" in err
    lines = out.splitlines()
    assert lines[0] == ("submitted 8 jobs through the translate hook (the agent recorded each for the "
                        "coordinator); none came back steered to a holder: no copy of their inputs existed yet "
                        "(each follows the copies made while it waits: HTDA_InputKey)"), err
    assert "  dataset1: 2 of 2 files held (demo)" in lines
    new_job = lines[lines.index("a new job reading dataset1 comes back from the translate hook with:") + 1:]
    assert '  HTDA_PreferredNodes = "demo"' in new_job and "  HTDA_CachedFraction = 1.0" in new_job
    assert any(line.startswith("  HTDA_InputKey = ") for line in new_job)
    assert any(line.startswith("  Rank = ") and "HTDA_CacheAffinity" in line for line in new_job)
    assert re.fullmatch(r"copies on the cache \(htda cache\): 4, \d+\.\d KiB", lines[lines.index(
        "  dataset1: 2 of 2 files held (demo)") - 1])  # sizes in binary units, as every table shows them
    assert re.search(r"  dataset1: 2 files, \d+\.\d KiB\n", err)
    import uproot

    written = sorted(storage.rglob("*.root"))
    assert [p.relative_to(storage).as_posix() for p in written] == [
        "store/demo/dataset1/events_001.root", "store/demo/dataset1/events_002.root",
        "store/demo/dataset2/events_001.root", "store/demo/dataset2/events_002.root"]
    with uproot.open(written[0]) as root_file:
        assert root_file["Events"].num_entries == 3000
    code = main(["--json", "demo", "--config", str(path), "--datasets", "2", "--files", "2", "--events", "3000",
                 "--jobs", "2", "--wait", "30"])
    out, err = capsys.readouterr()
    outcome = json.loads(out)  # exact numbers for scripts; no progress lines under --json
    assert code == 0 and err == ""
    assert outcome["jobs"] == 2 and outcome["steered"] == 2 and outcome["copies"] == 4
    assert outcome["copy_bytes"] == sum(p.stat().st_size for p in written)
    assert outcome["datasets"][0] == {"name": "dataset1", "files": 2, "held": 2, "nodes": ["demo"]}
    assert 'HTDA_PreferredNodes = "demo"' in outcome["new_job"]


def test_demo_names_what_the_config_lacks(tmp_path, capsys):
    path = write_config(tmp_path, "x", ["locator"], free_port(), [])
    assert main(["demo", "--config", str(path)]) == 2
    assert "the demo needs a node running coordinator" in capsys.readouterr().err


SCREENSHOT = Path(os.environ.get("HTDA_DASHBOARD_SCREENSHOT", "")) if os.environ.get("HTDA_DASHBOARD_SCREENSHOT") \
    else None


def test_the_dashboard_after_the_demo(pool, tmp_path):
    """The dashboard in a real Chromium once the demo ran: the pool, the copies, the ratings, nothing failing.
    HTDA_DASHBOARD_SCREENSHOT=docs/_static/dashboard.png also saves the picture the docs show."""
    from tests.ops.browser import Browser, chromium_binary

    if chromium_binary() is None:
        pytest.skip("Chromium missing (apt-get install chromium chromium-driver)")
    path, _, node = pool
    assert main(["demo", "--config", str(path), "--datasets", "3", "--files", "3", "--events", "3000", "--jobs",
                 "12", "--wait", "30"]) == 0
    page = Browser(f"{node.url}/dashboard", tmp_path / "chromium")
    try:
        text = lambda selector: page.evaluate(f"document.querySelector({selector!r}).innerText")  # noqa: E731
        wait_until(lambda: text("#total-files") == "9", timeout=20, what="the page to count the 9 copies")
        top = wait_until(lambda: "/store/demo/dataset1/events_001.root" in text("#top-files") and text("#top-files"),
                         timeout=20, what="the page to list the rated files")
        assert "demo" in top  # the node each top file is placed on
        assert "no failing copies" in text("#failing")
        assert "idle" in text("#staging")
        assert "demo" in text("#members") and page.evaluate("document.getElementById('status').className") \
            == "status ok"
        if SCREENSHOT:
            page.screenshot(SCREENSHOT)
    finally:
        page.close()

