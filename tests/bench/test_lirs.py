"""bench/experiments/lirs.py: the LIRS prototype that the loop traces were measured with."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

from htda.simulator.policies import LRUPolicy
from tests.bench_scripts import load_bench_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "experiments" / "lirs.py"


def _lirs():
    return load_bench_script("experiments/lirs.py", "lirs_prototype")


def test_a_loop_one_block_longer_than_the_cache_hits_under_lirs_and_never_under_lru():
    """What LIRS is for: a loop over 101 blocks in a cache of 100.  LRU evicts each block just before its reuse;
    LIRS keeps its low-reuse-distance set resident and loses a block or two a pass."""
    loop = list(range(101)) * 20
    cache = _lirs().LirsCache(100)
    hits = [cache.request(block) for block in loop]
    lru_hits, _ = LRUPolicy(100).replay([0.0] * len(loop), loop, [1] * len(loop), [-1] * len(loop))
    assert lru_hits == 0
    later = hits[101:]  # after the first pass, which only misses
    assert sum(later) / len(later) > 0.95


def test_it_holds_at_most_its_capacity_and_hits_exactly_what_it_holds():
    lirs = _lirs()
    rng = random.Random(7)
    for capacity in (1, 2, 10, 50):
        cache = lirs.LirsCache(capacity)
        for _ in range(5000):
            block = int(rng.paretovariate(1.2)) if rng.random() < 0.7 else rng.randrange(400)
            held = block in cache.resident
            assert cache.request(block) == held
            assert block in cache.resident  # a miss is staged
            assert len(cache.resident) <= capacity and cache.lir <= cache.resident
            assert set(cache.queue) == cache.resident - cache.lir  # the queue is the resident HIR blocks
            assert len(cache.lir) <= cache.lir_room
            assert len(cache.stack) <= (1 + lirs.STACK_GHOSTS) * capacity + 1


def test_with_sizes_it_holds_at_most_its_bytes_and_hits_exactly_what_it_holds():
    lirs = _lirs()
    rng = random.Random(11)
    size_of = {block: rng.choice((1, 3, 40, 200)) for block in range(300)}
    for capacity in (150, 1000, 5000):
        cache = lirs.LirsCache(capacity)
        for _ in range(5000):
            block = int(rng.paretovariate(1.1)) % 300 if rng.random() < 0.7 else rng.randrange(300)
            held = block in cache.resident
            assert cache.request(block, size_of[block]) == held
            assert cache.used == sum(size_of[b] for b in cache.resident) <= capacity
            assert cache.lir_bytes == sum(size_of[b] for b in cache.lir) <= cache.lir_room
            assert set(cache.queue) == cache.resident - cache.lir and cache.lir <= cache.resident
        assert cache.request(10**6, capacity + 1) is False and 10**6 not in cache.resident  # larger than the cache


def test_the_script_prints_the_byte_hit_ratio_at_each_size(tmp_path):
    trace = tmp_path / "sized.csv"
    trace.write_text("timestamp,object_id,size_bytes\n" + "".join(f"{i},o{i % 3},{10 * (i % 3 + 1)}\n"
                                                                 for i in range(30)))
    run = subprocess.run([sys.executable, str(SCRIPT), str(trace), "50,100"], capture_output=True, text=True,
                         timeout=120, check=True)
    # footprint 60 bytes: at 50 % (30 bytes) o2 (30) fits alone, at 100 % all three stay after their first read
    ratios = [float(line.split()[-1]) for line in run.stdout.splitlines()]
    assert len(ratios) == 2 and 0.0 < ratios[0] < ratios[1] == (600 - 60) / 600
