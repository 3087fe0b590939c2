"""YCSB workload definitions: ``.properties`` files, ``-p`` overrides, and the operation
streams they generate (pre-generated arrays, so every peer gets the same stream and
generation is never timed)."""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from learnedidx.errors import WorkloadError
from learnedidx.workloads import generators as gen

READ, UPDATE, INSERT, SCAN, RMW = range(5)
OP_NAMES = ("READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE")
BUILTIN = {"A": "workloada", "B": "workloadb", "C": "workloadc", "D": "workloadd", "E": "workloade",
           "F": "workloadf", "D'": "workloadd_prime", "E'": "workloade_prime", "DP": "workloadd_prime",
           "EP": "workloade_prime"}


def parse_properties(text: str) -> dict[str, str]:
    """Java-style ``key=value`` lines; ``#``/``!`` comments."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise WorkloadError(f"not a property line: {line!r}")
        props[line[:sep].strip()] = line[sep + 1:].strip()
    return props


def load_properties(name_or_path: str) -> dict[str, str]:
    """A built-in workload (A–F, D', E') or a YCSB ``.properties`` file."""
    key = name_or_path.upper()
    if key in BUILTIN:
        return parse_properties(resources.files("learnedidx.workloads").joinpath("ycsb_workloads", BUILTIN[key]).read_text())
    p = Path(name_or_path)
    if not p.exists():
        raise WorkloadError(f"no workload {name_or_path!r}: not one of {sorted(BUILTIN)} and no such file")
    return parse_properties(p.read_text())


@dataclass
class Workload:
    """The CoreWorkload parameters this runner honours."""

    recordcount: int = 1000
    operationcount: int = 1000
    readproportion: float = 0.95
    updateproportion: float = 0.05
    insertproportion: float = 0.0
    scanproportion: float = 0.0
    readmodifywriteproportion: float = 0.0
    requestdistribution: str = "uniform"
    maxscanlength: int = 1000
    scanlengthdistribution: str = "uniform"
    fieldcount: int = 10
    fieldlength: int = 100
    insertorder: str = "hashed"
    zipfianconstant: float = gen.ZIPFIAN_CONSTANT
    hotspotdatafraction: float = 0.2
    hotspotopnfraction: float = 0.8

    @classmethod
    def from_properties(cls, props: dict[str, str], overrides: dict[str, str] | None = None) -> "Workload":
        merged = {**props, **(overrides or {})}
        w = cls()
        for f in cls.__dataclass_fields__.values():
            if f.name in merged:
                raw = merged[f.name]
                try:
                    setattr(w, f.name, type(getattr(w, f.name))(raw))
                except ValueError:
                    raise WorkloadError(f"bad value for {f.name}: {raw!r}") from None
        total = w.readproportion + w.updateproportion + w.insertproportion + w.scanproportion + w.readmodifywriteproportion
        if total <= 0:
            raise WorkloadError("operation proportions sum to zero")
        if w.requestdistribution not in ("uniform", "zipfian", "latest", "hotspot", "exponential", "recent10"):
            raise WorkloadError(f"unknown requestdistribution {w.requestdistribution!r}")
        if w.recordcount < 1 or w.operationcount < 0:
            raise WorkloadError("recordcount must be >= 1 and operationcount >= 0")
        return w


@dataclass
class OpStream:
    ops: np.ndarray  # int8 op codes
    keys: list  # key bytes per op
    scan_lengths: np.ndarray  # int32 (0 where not a scan)
    values: list  # value bytes per write op (None otherwise)


def value_for(keynum: int, version: int, size: int, pool: bytes) -> bytes:
    """A deterministic pseudo-random value: a window of a random pool."""
    start = (keynum * 7919 + version * 104729) % (len(pool) - size)
    return pool[start:start + size]


class KeySpace:
    """Maps key numbers to key bytes: YCSB names, or a list of real keys (file, dataset)."""

    def __init__(self, w: Workload, real_keys: list[bytes] | None = None) -> None:
        self.hashed = w.insertorder == "hashed"
        self.real = real_keys

    def names(self, keynums: np.ndarray) -> list[bytes]:
        if self.real is not None:
            if len(keynums) and int(np.max(keynums)) >= len(self.real):
                raise WorkloadError(f"the key file has {len(self.real)} keys; the workload needs more")
            return [self.real[i] for i in np.asarray(keynums).tolist()]
        return gen.key_names(keynums, self.hashed)


def load_stream(w: Workload, keyspace: KeySpace, seed: int = 0) -> OpStream:
    n = w.recordcount
    pool = np.random.default_rng(seed + 1).bytes(1 << 16)
    size = w.fieldcount * w.fieldlength
    keynums = np.arange(n, dtype=np.int64)
    return OpStream(np.full(n, INSERT, np.int8), keyspace.names(keynums), np.zeros(n, np.int32),
                    [value_for(k, 0, size, pool) for k in keynums.tolist()])


def run_stream(w: Workload, keyspace: KeySpace, seed: int = 0) -> OpStream:
    """The run phase's operations, as CoreWorkload draws them (single client thread)."""
    rng = np.random.default_rng(seed)
    m = w.operationcount
    props = np.array([w.readproportion, w.updateproportion, w.insertproportion, w.scanproportion,
                      w.readmodifywriteproportion])
    ops = rng.choice(5, size=m, p=props / props.sum()).astype(np.int8)
    inserts = ops == INSERT
    # Acknowledged insert counter: the i-th insert gets recordcount + i.
    ins_rank = np.cumsum(inserts) - inserts
    last = w.recordcount + ins_rank  # keys 0..last-1 exist before op i
    u = rng.random(m)
    dist = w.requestdistribution
    if dist == "uniform":
        k = (u * w.recordcount).astype(np.int64)
    elif dist == "zipfian":
        expected_new = int(m * w.insertproportion * 2)
        k = gen.ScrambledZipfian(0, w.recordcount + expected_new - 1).sample(u)
        # CoreWorkload.nextKeynum: redraw keys past the last acknowledged insert.
        bad = k >= last
        while bad.any():
            k[bad] = gen.ScrambledZipfian(0, w.recordcount + expected_new - 1).sample(rng.random(int(bad.sum())))
            bad = k >= last
    elif dist == "latest":
        k = gen.skewed_latest(u, last.astype(np.int64), w.zipfianconstant)
    elif dist == "hotspot":
        k = gen.hotspot(u, rng.random(m), 0, w.recordcount - 1, w.hotspotdatafraction, w.hotspotopnfraction)
    elif dist == "exponential":
        k = np.minimum(gen.exponential(u, w.recordcount), w.recordcount - 1)
    else:  # recent10 (SIA's D'): one of the last <= 10 inserted keys
        k = last - 1 - (u * np.minimum(last, 10)).astype(np.int64)
    k = np.where(inserts, last, k)
    if w.scanlengthdistribution == "constant":
        sl = np.full(m, w.maxscanlength, np.int32)
    else:
        sl = (1 + rng.integers(0, w.maxscanlength, m)).astype(np.int32)
    sl = np.where(ops == SCAN, sl, 0).astype(np.int32)
    pool = rng.bytes(1 << 16)
    size = w.fieldcount * w.fieldlength
    values = [value_for(int(kk), i + 1, size, pool) if o in (UPDATE, INSERT, RMW) else None
              for i, (o, kk) in enumerate(zip(ops.tolist(), k.tolist()))]
    return OpStream(ops, keyspace.names(k), sl, values)
