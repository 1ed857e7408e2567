"""The locator's index against a plain model of it, under random reports, deltas and drops."""

from __future__ import annotations

import json
import random
import threading

from htda.locator.index import HoldingsIndex

LFNS = [f"/store/data/Run2026A/file_{i:03d}.root" for i in range(40)]
NODES = ["w1", "w2", "w3", "w4"]


class Model:
    """What the index must answer: node -> {lfn: size}, nothing clever."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, int]] = {}

    def holders(self, lfn: str) -> dict[str, int]:
        return {node: held[lfn] for node, held in sorted(self.nodes.items()) if lfn in held}

    def shares(self, asked: list[str]) -> dict[str, dict[str, float]]:
        wanted = list(dict.fromkeys(asked))
        sizes = {lfn: max(max(self.holders(lfn).values()), 1) for lfn in wanted if self.holders(lfn)}
        unheld = len(wanted) - len(sizes)
        known = sum(sizes.values())
        total = known + unheld * (known / len(sizes) if sizes else 1)
        out: dict[str, dict[str, float]] = {}
        for lfn, size in sizes.items():
            for node in self.holders(lfn):
                share = out.setdefault(node, {"files": 0, "bytes": 0})
                share["files"] += 1
                share["bytes"] += size
        return {n: {**s, "fraction": round(s["bytes"] / total, 6)} for n, s in out.items()}


def random_step(rng: random.Random, index: HoldingsIndex, model: Model) -> None:
    node = rng.choice(NODES)
    action = rng.random()
    if action < 0.3:
        files = {lfn: rng.choice([0, 10, 1000, 5 << 30]) for lfn in rng.sample(LFNS, rng.randrange(0, 15))}
        assert index.replace(node, files) == len(files)
        model.nodes[node] = dict(files)
    elif action < 0.85:
        added = {lfn: rng.choice([7, 1000, 3 << 30]) for lfn in rng.sample(LFNS, rng.randrange(0, 6))}
        removed = rng.sample(LFNS, rng.randrange(0, 6))
        held = model.nodes.setdefault(node, {})
        for lfn in removed:
            if lfn not in added:
                held.pop(lfn, None)
        held.update(added)
        assert index.update(node, added, removed) == len(held)
    else:
        assert index.drop(node) == len(model.nodes.pop(node, {}))


def test_the_index_answers_as_the_plain_model_through_random_reports():
    rng = random.Random(18)
    index, model = HoldingsIndex(), Model()
    for _ in range(600):
        random_step(rng, index, model)
        asked = rng.sample(LFNS, 8) + [LFNS[0]]
        result = index.lookup(asked)
        assert json.loads(result.files_json) == {lfn: list(model.holders(lfn)) for lfn in asked}
        assert result.nodes == model.shares(asked)
        lfn = rng.choice(LFNS)
        assert index.holders(lfn) == model.holders(lfn)
        assert index.file_count == len({lfn for held in model.nodes.values() for lfn in held})
        assert {n: (v["files"], v["bytes"]) for n, v in index.nodes().items()} == {
            n: (len(held), sum(held.values())) for n, held in model.nodes.items()}


def test_a_lookup_matches_the_canonical_form_and_answers_with_the_lfn_as_asked():
    index = HoldingsIndex()
    index.replace("w1", {"/store/a.root": 100})
    result = index.lookup(["/store//a.root", "/store/b.root"])
    assert json.loads(result.files_json) == {"/store//a.root": ["w1"], "/store/b.root": []}
    assert result.held == 1 and result.nodes["w1"]["fraction"] == 0.5


def test_lookups_during_writes_see_whole_holder_sets_with_sizes():
    """Readers take no lock: while writers swap holders and drop nodes, every answer stays well formed."""
    index = HoldingsIndex()
    stop = threading.Event()
    problems: list[str] = []

    def read() -> None:
        while not stop.is_set():
            try:
                result = index.lookup(LFNS)
            except Exception as exc:  # noqa: BLE001 - a reader thread's failure is what this test looks for
                problems.append(repr(exc))
                return
            for lfn, nodes in json.loads(result.files_json).items():
                if nodes != sorted(set(nodes)):
                    problems.append(f"{lfn}: {nodes}")
            if any(share["bytes"] < share["files"] for share in result.nodes.values()):
                problems.append(f"a holder without bytes: {result.nodes}")

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    rng, model = random.Random(3), Model()
    try:
        for _ in range(3000):
            random_step(rng, index, model)
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert not problems, problems[:5]
