"""libCacheSim's binary traces, oracleGeneral and vscsi: read as the same requests written as CSV."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
import zstandard

from htda.simulator.binary import OracleGeneralReader, PairInterner, VscsiReader
from htda.simulator.suite import suite_traces
from htda.simulator.trace import (
    CsvTraceReader,
    Interner,
    Reading,
    TraceError,
    count_requests,
    is_oracle_general,
    is_vscsi,
    trace_name,
    trace_reader,
)

from .helpers import oracle_bytes, vscsi_bytes

# (time, id, size): block 7 is read with two sizes (two objects, as in a CSV trace), ids past 32 bits, a size 0
REQUESTS = [(10, 7, 512), (10, 2**40 + 1, 4096), (11, 7, 512), (12, 3, 0), (12, 7, 1024), (13, 2**40 + 1, 4096),
            (15, 9, 512), (15, 7, 512), (20, 3, 0), (21, 2**40 + 1, 4096)]


def vscsi_requests() -> list[tuple[float, int, int]]:
    """:data:`REQUESTS` at times in microseconds, as vscsi traces have them"""
    return [(t + i * 0.000125, oid, size) for i, (t, oid, size) in enumerate(REQUESTS)]


def csv_text(requests: list[tuple[int, int, int]]) -> str:
    return "timestamp,object_id,size_bytes\n" + "".join(f"{t},{oid},{size}\n" for t, oid, size in requests)


def columns(reader) -> dict[str, list]:
    chunks = list(reader)
    return {name: np.concatenate([getattr(c, name) for c in chunks]).tolist()
            for name in ("times", "ids", "sizes", "groups")}


@pytest.mark.parametrize("chunk_size", [1, 3, 100])
@pytest.mark.parametrize("name, pack", [("t.oracleGeneral.bin", lambda b: b),
                                        ("t.oracleGeneral.zst", lambda b: zstandard.ZstdCompressor().compress(b))])
def test_reads_the_requests_the_csv_holds_in_any_chunks(tmp_path, name, pack, chunk_size):
    binary, text = tmp_path / name, tmp_path / "t.csv"
    binary.write_bytes(pack(oracle_bytes(REQUESTS)))
    text.write_text(csv_text(REQUESTS))
    reader = trace_reader(binary, chunk_size=chunk_size)
    assert isinstance(reader, OracleGeneralReader)
    got = columns(reader)
    assert got == columns(CsvTraceReader(text))
    assert got["ids"] == [0, 1, 0, 2, 3, 1, 4, 0, 2, 1]  # (id, size) pairs, numbered as first seen
    assert reader.object_sizes().tolist() == [512, 4096, 0, 1024, 512]
    assert count_requests(binary) == len(REQUESTS)


def simulate(path, *options, given=None) -> list[tuple]:
    """(policy, capacity, hits, hit bytes) of ``htda simulate path`` at 5 and 20 %, with the adaptive policy."""
    out = subprocess.run([sys.executable, "-m", "htda.cli", "simulate", str(path), "--sizes", "5%,20%",
                          "--half-lives", "auto", "--admission", "none", "--policies", "lru,arc", "--no-bound",
                          "--json", *options], input=given, capture_output=True, check=True).stdout
    return [(r["policy"], r["capacity_bytes"], r["hits"], r["hit_bytes"]) for r in json.loads(out)["results"]]


def test_a_replay_gives_the_hits_of_the_csv(tmp_path):
    rng = np.random.default_rng(5)
    ids = rng.zipf(1.3, 4000) % 500
    requests = [(i // 10, int(oid), 512 * (1 + int(oid) % 8)) for i, oid in enumerate(ids)]
    (tmp_path / "z.oracleGeneral.zst").write_bytes(zstandard.ZstdCompressor().compress(oracle_bytes(requests)))
    (tmp_path / "z.csv").write_text(csv_text(requests))

    binary = simulate(tmp_path / "z.oracleGeneral.zst")
    assert binary == simulate(tmp_path / "z.csv")
    # on a pipe there is no name to tell the format by: --format says it
    packed = (tmp_path / "z.oracleGeneral.zst").read_bytes()
    assert binary == simulate("-", "--format", "oracleGeneral", given=packed)
    unsaid = subprocess.run([sys.executable, "-m", "htda.cli", "simulate", "-", "--sizes", "5%"], input=packed,
                            capture_output=True, text=False)
    assert unsaid.returncode != 0 and b"read with --format oracleGeneral" in unsaid.stderr
    assert {policy for policy, *_ in binary} == {"lru", "arc", "htda(auto)", "belady"}
    assert all(hits > 0 for *_, hits, _ in binary)


@pytest.mark.parametrize("name, content, message", [
    ("bad.oracleGeneral", oracle_bytes(REQUESTS)[:-5], r"partial record \(19 bytes after record 9\): oracleGeneral "
                                                        r"records are 24 bytes each"),
    ("bad.oracleGeneral", oracle_bytes([(10, 1, 5), (12, 2, 5), (11, 3, 5)]),
     "record 3: timestamp 11 is earlier than the previous record's 12"),
    ("bad.oracleGeneral", b"", "no requests"),
    ("bad.oracleGeneral", zstandard.ZstdCompressor().compress(oracle_bytes(REQUESTS))[:-9],
     "compressed data ends early or is corrupt"),
    ("bad.vscsi", vscsi_bytes(vscsi_requests(), 1)[:-5], r"partial record \(27 bytes after record 9\): vscsi records "
                                                          r"are 32 bytes each"),
    ("bad.vscsi", vscsi_bytes(vscsi_requests(), 2)[:-5], r"partial record \(35 bytes after record 9\): vscsi records "
                                                          r"are 40 "),
    ("bad.vscsi", oracle_bytes(REQUESTS), r"not a vscsi trace \(its first records carry neither version 1's mark nor "
                                          r"version 2's\)"),
    ("bad.vscsi", vscsi_bytes([(2.0, 1, 512), (1.5, 2, 512)], 1),
     "record 2: timestamp 1.5 is earlier than the previous record's 2 "),
], ids=["partial-record", "time-backwards", "empty", "zstd-truncated", "vscsi-partial-v1", "vscsi-partial-v2",
        "not-vscsi", "vscsi-time-backwards"])
def test_a_broken_trace_is_named_with_why(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceError, match=f"{name}.*{message}"):
        list(trace_reader(path, chunk_size=2))


def test_the_opns_variant_is_refused_by_name(tmp_path):
    path = tmp_path / "msr.oracleGeneralOpNS.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(bytes(27 * 8)))
    for fmt in ("auto", "oracleGeneral", "csv"):
        with pytest.raises(TraceError, match="oracleGeneralOpNS format .* is not read"):
            trace_reader(path, Reading(fmt=fmt))


def test_time_going_back_across_chunks_is_found(tmp_path):
    path = tmp_path / "t.oracleGeneral"
    path.write_bytes(oracle_bytes([(10, 1, 5), (12, 2, 5), (11, 3, 5)]))
    with pytest.raises(TraceError, match="record 3: timestamp 11 is earlier than the previous record's 12"):
        list(trace_reader(path, chunk_size=1))


def test_the_format_is_told_by_the_name_as_libcachesim_tells_it():
    named = ["w106.oracleGeneral.bin.zst", "msr_hm_0.oracleGeneral.zst", "c.oraclegeneral", "d/x.oracleGeneralBin",
             "cluster52.oracleGeneral.sample10"]
    others = ["x.oracleGeneralOpNS.zst", "x.csv", "oracleGeneral_notes.csv", "x.oracleSysTwrNS.zst"]
    assert [is_oracle_general(n) for n in named] == [True] * len(named)
    assert [is_oracle_general(n) for n in others] == [False] * len(others)


@pytest.mark.parametrize("chunk_size", [1, 3, 100])
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name, pack", [("w01.vscsi", lambda b: b),
                                        ("w01.vscsi.zst", lambda b: zstandard.ZstdCompressor().compress(b))])
def test_a_vscsi_trace_of_either_version_reads_as_the_csv(tmp_path, name, pack, version, chunk_size):
    binary, text = tmp_path / name, tmp_path / "t.csv"
    binary.write_bytes(pack(vscsi_bytes(vscsi_requests(), version)))
    text.write_text(csv_text(vscsi_requests()))
    reader = trace_reader(binary, chunk_size=chunk_size)
    assert isinstance(reader, VscsiReader)
    got = columns(reader)
    assert got == columns(CsvTraceReader(text))
    assert got["times"][:2] == [10.0, 10.000125]  # microseconds, kept
    assert reader.object_sizes().tolist() == [512, 4096, 0, 1024, 512]
    assert count_requests(binary) == len(REQUESTS)


def test_a_vscsi_trace_replays_to_the_hits_of_the_csv_and_reads_from_a_pipe(tmp_path):
    rng = np.random.default_rng(7)
    requests = [(i * 0.0015, int(oid), 4096 * (1 + int(oid) % 4)) for i, oid in enumerate(rng.zipf(1.2, 3000) % 400)]
    (tmp_path / "b.vscsi").write_bytes(vscsi_bytes(requests, 2))
    (tmp_path / "b.csv").write_text(csv_text(requests))

    hits = simulate(tmp_path / "b.vscsi")
    assert hits == simulate(tmp_path / "b.csv") and all(h > 0 for *_, h, _ in hits)
    assert hits == simulate("-", "--format", "vscsi", given=(tmp_path / "b.vscsi").read_bytes())


def test_a_vscsi_trace_is_told_by_its_name():
    assert [is_vscsi(n) for n in ("cloudPhysicsIO.vscsi", "d/w01.VSCSI.zst", "x.csv", "vscsi.csv")] == \
        [True, True, False, False]
    assert [trace_name(n) for n in ("cloudPhysicsIO.vscsi", "w01.vscsi.zst")] == ["cloudPhysicsIO", "w01"]


def test_the_suite_takes_oracle_general_traces(tmp_path):
    (tmp_path / "cluster52.oracleGeneral.zst").write_bytes(zstandard.ZstdCompressor().compress(oracle_bytes(REQUESTS)))
    (tmp_path / "p3.csv").write_text(csv_text(REQUESTS))
    (tmp_path / "w106.oracleGeneral.bin").write_bytes(oracle_bytes(REQUESTS))
    (tmp_path / "notes.txt").write_text("not a trace")
    (tmp_path / "w01.vscsi.gz").write_bytes(gzip.compress(vscsi_bytes(vscsi_requests(), 1)))
    (tmp_path / "old.oracleGeneral").mkdir()
    traces = suite_traces(tmp_path, None)
    assert [t.name for t in traces] == ["cluster52", "p3", "w01", "w106"]
    assert [sum(map(len, t.chunks())) for t in traces] == [len(REQUESTS)] * 4


@pytest.mark.parametrize("seed", range(4))
def test_the_array_interner_numbers_pairs_as_a_dict_does_over_any_chunks(seed):
    """Ids seen with several sizes (in one chunk or across chunks), ids past 32 bits, pairs met again chunks later."""
    rng = np.random.default_rng(seed)
    n = 3000
    ids = rng.integers(0, 300, n).astype(np.uint64) * np.uint64(2**33 + 1)
    sizes = rng.choice([0, 512, 4096, 4096, 4096], n).astype(np.int64)  # mostly one size an id, sometimes others
    arrays, reference = PairInterner(), Interner()
    bounds = np.sort(rng.choice(np.arange(1, n), 25, replace=False))
    for part_ids, part_sizes in zip(np.split(ids, bounds), np.split(sizes, bounds)):
        # the interner is given each chunk's distinct pairs in order of first appearance
        distinct = list(dict.fromkeys(zip(part_ids.tolist(), part_sizes.tolist())))
        got = arrays.intern(np.array([i for i, _ in distinct], dtype=np.uint64),
                            np.array([s for _, s in distinct], dtype=np.int64))
        assert got.tolist() == [reference(pair) for pair in distinct]
    assert len(arrays) == len(reference) > 300
    assert arrays.sizes().tolist() == [size for _, size in reference.names]


@pytest.mark.parametrize("chunk_size", [7, 64, 5000])
def test_ids_resized_within_and_across_chunks_are_numbered_as_the_csv_numbers_them(tmp_path, chunk_size):
    rng = np.random.default_rng(chunk_size)
    n = 4000
    ids = rng.integers(0, 400, n) * (2**35 + 3)
    sizes = rng.choice([1, 512, 4096, 4096, 4096, 4096], n)  # an id mostly keeps a size, and sometimes changes it
    requests = list(zip(range(n), ids.tolist(), sizes.tolist()))
    binary, text = tmp_path / "t.oracleGeneral.bin", tmp_path / "t.csv"
    binary.write_bytes(oracle_bytes(requests))
    text.write_text(csv_text(requests))
    reader, csv = trace_reader(binary, chunk_size=chunk_size), CsvTraceReader(text)
    assert columns(reader)["ids"] == columns(csv)["ids"]
    assert reader.object_sizes().tolist() == csv.object_sizes().tolist()
    assert len(reader.object_sizes()) > 400


@pytest.mark.parametrize("chunk_size", [1, 3, 100])
def test_sort_replays_a_trace_out_of_order_as_the_same_trace_in_order(tmp_path, chunk_size):
    """Either format, shuffled (as a log several threads wrote): with ``sort`` the chunks of the trace in time
    order, names numbered as that trace numbers them and ties kept in the file's order; without it, an error."""
    rng = np.random.default_rng(3)
    shuffled = [REQUESTS[i] for i in rng.permutation(len(REQUESTS))]
    in_order = sorted(shuffled, key=lambda request: request[0])  # stable: ties as the shuffled file has them
    for name, write in (("t.oracleGeneral", lambda p, r: p.write_bytes(oracle_bytes(r))),
                        ("t.csv", lambda p, r: p.write_text(csv_text(r)))):
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "out").mkdir(exist_ok=True)
        write(tmp_path / "in" / name, in_order)
        write(tmp_path / "out" / name, shuffled)
        with pytest.raises(TraceError, match=r"is earlier than the previous .*--sort replays"):
            columns(trace_reader(tmp_path / "out" / name, chunk_size=chunk_size))
        expected = trace_reader(tmp_path / "in" / name, chunk_size=chunk_size)
        reader = trace_reader(tmp_path / "out" / name, Reading(sort=True), chunk_size=chunk_size)
        read: list[int] = []
        reader.sorting = read.append  # a progress bar's call
        next(iter(reader))
        assert read == [*range(chunk_size, len(REQUESTS), chunk_size), len(REQUESTS)]  # all before the first chunk
        first = columns(reader)
        assert first == columns(expected) and first["times"] == [t for t, _, _ in in_order]
        assert columns(reader) == first  # a second pass (the replay reads a trace more than once)
        assert reader.object_sizes().tolist() == expected.object_sizes().tolist()
