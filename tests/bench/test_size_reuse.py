"""bench/experiments/size_reuse.py: how often a request's object is read again, by the request's size."""

from __future__ import annotations

import pytest

from tests.bench_scripts import load_bench_script


def _size_reuse():
    return load_bench_script("experiments/size_reuse.py", "size_reuse")


def test_small_objects_read_again_and_large_ones_read_once_are_told_apart(tmp_path):
    """Two 512-byte objects each read twice, two 64 KiB objects each read once, and an object whose id comes back
    with another size (another object): the classes' shares of bytes and of reads again are exact."""
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,object_id,size_bytes\n"
                     "1,a,512\n2,b,512\n3,big1,65536\n4,a,512\n5,b,512\n6,big2,65536\n7,a,1024\n")
    classes = {k: tuple(rest) for k, *rest in _size_reuse().reuse_by_size(str(trace))}
    total = 4 * 512 + 2 * 65536 + 1024
    assert set(classes) == {9, 10, 16}
    share, again, first_again = classes[9]
    assert share == pytest.approx(4 * 512 / total)
    assert again == pytest.approx(0.5)  # the first reads of a and b are read again, the second ones are not
    assert first_again == pytest.approx(1.0)
    assert classes[16][1:] == (0.0, 0.0)
    assert classes[10] == (pytest.approx(1024 / total), 0.0, 0.0)  # ("a", 1024) is not ("a", 512)
