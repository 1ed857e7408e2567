"""A NanoAOD-like dataset of ROOT files, written with uproot and kept between runs.

Each file holds an ``Events`` tree with jagged muon and jet collections
(``nMuon``, ``Muon_pt``, ``Muon_eta``, ...; ``nJet``, ``Jet_pt``, ...) and a
few flat branches, as CMS NanoAOD does.  Contents are a pure function of
(seed, file index, events), so the same parameters give the same bytes on
every machine; a manifest in the dataset directory records the parameters,
and a directory whose manifest matches is reused as it is.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import awkward as ak
import numpy as np

__all__ = ["DatasetSpec", "DatasetFile", "ensure_dataset", "BYTES_PER_EVENT", "LFN_DIR"]

LFN_DIR = "/store/data/Run2026A/DoubleMuon/NANOAOD"
#: uncompressed bytes per event of the layout below (measured; used to size files)
BYTES_PER_EVENT = 210
CHUNK = 50_000  # events per basket batch: ~1 MB baskets for the jet branches, bounded writer memory


@dataclass(frozen=True)
class DatasetSpec:
    """What to write: total size, the range of file sizes, compression and seed."""

    total_mb: float = 2048
    min_file_mb: float = 20
    max_file_mb: float = 120
    compression: str = "none"  # none, zlib:N, lzma:N, zstd:N, lz4:N
    seed: int = 2026

    def __post_init__(self) -> None:
        if not 0 < self.min_file_mb <= self.max_file_mb:
            raise ValueError("need 0 < min_file_mb <= max_file_mb")
        if self.total_mb < self.min_file_mb:
            raise ValueError("total_mb must be at least min_file_mb")
        compression_of(self.compression)

    def file_sizes_mb(self) -> list[float]:
        """Target size of each file: drawn between min and max until the total is reached."""
        rng = np.random.default_rng(self.seed)
        sizes: list[float] = []
        while sum(sizes) < self.total_mb:
            left = self.total_mb - sum(sizes)
            size = float(rng.uniform(self.min_file_mb, self.max_file_mb))
            sizes.append(max(self.min_file_mb, min(size, left)) if left < self.max_file_mb else size)
        return sizes


@dataclass(frozen=True)
class DatasetFile:
    """One written file: its LFN, where it is, and its size."""

    lfn: str
    path: str
    size: int
    events: int


def compression_of(text: str):
    """uproot's compression object for ``none`` or ``ALGO:LEVEL``."""
    import uproot

    if text == "none":
        return None
    algo, _, level = text.partition(":")
    kinds = {"zlib": uproot.ZLIB, "lzma": uproot.LZMA, "zstd": uproot.ZSTD, "lz4": uproot.LZ4}
    if algo not in kinds or not level.isdigit():
        raise ValueError(f"compression must be none or one of {', '.join(kinds)} with a level, e.g. zlib:1")
    return kinds[algo](int(level))


def make_events(rng: np.random.Generator, n: int) -> dict[str, object]:
    """One chunk of events: jagged muons and jets, flat MET and event numbers."""
    n_mu = rng.poisson(1.6, n).astype(np.int32)
    n_jet = rng.poisson(5.0, n).astype(np.int32)
    muons = _collection(rng, n_mu, pt_scale=25.0, extra={"charge": lambda k: rng.choice(
        np.array([-1, 1], dtype=np.int32), k), "pfRelIso04_all": lambda k: rng.exponential(0.1, k)})
    jets = _collection(rng, n_jet, pt_scale=40.0, extra={"btagDeepFlavB": lambda k: rng.uniform(0, 1, k)})
    return {
        "run": np.full(n, 1, dtype=np.int32),
        "event": np.arange(n, dtype=np.int64),
        "MET_pt": rng.exponential(30.0, n).astype(np.float32),
        "MET_phi": rng.uniform(-math.pi, math.pi, n).astype(np.float32),
        "Muon": muons,
        "Jet": jets,
    }


def _collection(rng: np.random.Generator, counts: np.ndarray, pt_scale: float, extra: dict) -> ak.Array:
    total = int(counts.sum())
    fields = {
        "pt": (rng.exponential(pt_scale, total) + 3.0).astype(np.float32),
        "eta": rng.normal(0.0, 1.4, total).astype(np.float32),
        "phi": rng.uniform(-math.pi, math.pi, total).astype(np.float32),
        "mass": np.abs(rng.normal(0.1, 0.02, total)).astype(np.float32),
    }
    for name, draw in extra.items():
        values = draw(total)
        fields[name] = values.astype(np.int32 if values.dtype.kind == "i" else np.float32)
    return ak.unflatten(ak.zip(fields), counts)


def write_file(path: Path, events: int, seed: int, compression: str) -> None:
    """Write one file of ``events`` events under a temporary name, then rename it into place."""
    import uproot

    tmp = path.with_suffix(".part")
    rng = np.random.default_rng(seed)
    with uproot.recreate(tmp, compression=compression_of(compression)) as out:
        done = 0
        while done < events:
            chunk = make_events(rng, min(CHUNK, events - done))
            if done == 0:
                # NanoAOD names: a counter nMuon and branches Muon_pt, Muon_eta, ...
                out.mktree("Events", {k: getattr(v, "type", None) or v.dtype for k, v in chunk.items()},
                           counter_name=lambda counted: "n" + counted,
                           field_name=lambda outer, inner: f"{outer}_{inner}")
            out["Events"].extend(chunk)
            done += len(chunk["run"])
    tmp.rename(path)


def ensure_dataset(directory: Path, spec: DatasetSpec, log=print) -> list[DatasetFile]:
    """The dataset under ``directory`` (its storage root), written if missing or written with other parameters."""
    manifest = directory / "manifest.json"
    wanted = asdict(spec)
    if manifest.exists():
        saved = json.loads(manifest.read_text())
        if saved.get("spec") == wanted and all((directory / f["path"]).exists() for f in saved["files"]):
            return [DatasetFile(f["lfn"], str(directory / f["path"]), f["size"], f["events"]) for f in saved["files"]]
        manifest.unlink()
    files = []
    for index, size_mb in enumerate(spec.file_sizes_mb()):
        lfn = f"{LFN_DIR}/nano_{index:03d}.root"
        path = directory / lfn.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        events = max(1000, int(size_mb * 1e6 / BYTES_PER_EVENT))
        log(f"dataset: writing {lfn} ({events} events, ~{size_mb:.0f} MB)")
        write_file(path, events, spec.seed * 100_003 + index, spec.compression)
        files.append(DatasetFile(lfn, str(path), path.stat().st_size, events))
    records = [{**asdict(f), "path": str(Path(f.path).relative_to(directory))} for f in files]
    manifest.write_text(json.dumps({"spec": wanted, "files": records}, indent=1))
    return files
