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

READ, UPDATE, INSERT, SCAN, RMW, DELETE = range(6)
OP_NAMES = ("READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE", "DELETE")
DISTRIBUTIONS = ("uniform", "zipfian", "latest", "hotspot", "exponential", "recent10")
#: Properties whose YCSB names are not Python identifiers.
ALIASES = {"exponential.percentile": "exponential_percentile", "exponential.frac": "exponential_frac"}
BUILTIN = {"A": "workloada", "B": "workloadb", "C": "workloadc", "D": "workloadd", "E": "workloade",
           "F": "workloadf", "D'": "workloadd_prime", "E'": "workloade_prime", "DP": "workloadd_prime",
           "EP": "workloade_prime", "RI": "workloadri", "CU": "workloadcu"}


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
    """A built-in workload (A–F, D', E', RI: half reads, half inserts, CU: C with uniform
    reads) or a YCSB ``.properties`` file."""
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
    minscanlength: int = 1
    maxscanlength: int = 1000
    scanlengthdistribution: str = "uniform"
    fieldcount: int = 10
    fieldlength: int = 100
    insertorder: str = "hashed"
    zeropadding: int = 1
    zipfianconstant: float = gen.ZIPFIAN_CONSTANT
    hotspotdatafraction: float = 0.2
    hotspotopnfraction: float = 0.8
    exponential_percentile: float = 95.0
    exponential_frac: float = 0.8571428571

    @classmethod
    def from_properties(cls, props: dict[str, str], overrides: dict[str, str] | None = None) -> "Workload":
        merged = {ALIASES.get(k, k): v for k, v in {**props, **(overrides or {})}.items()}
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
        if w.requestdistribution not in DISTRIBUTIONS:
            raise WorkloadError(f"unknown requestdistribution {w.requestdistribution!r}")
        if w.scanlengthdistribution not in ("uniform", "zipfian", "constant"):
            raise WorkloadError(f"scanlengthdistribution {w.scanlengthdistribution!r} not allowed for scan length")
        if w.recordcount < 1 or w.operationcount < 0:
            raise WorkloadError("recordcount must be >= 1 and operationcount >= 0")
        if not 1 <= w.minscanlength <= w.maxscanlength:
            raise WorkloadError("need 1 <= minscanlength <= maxscanlength")
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
        self.zeropadding = w.zeropadding
        self.real = real_keys

    def names(self, keynums: np.ndarray) -> list[bytes]:
        if self.real is not None:
            if len(keynums) and int(np.max(keynums)) >= len(self.real):
                raise WorkloadError(f"the key file has {len(self.real)} keys; the workload needs more")
            return [self.real[i] for i in np.asarray(keynums).tolist()]
        return gen.key_names(keynums, self.hashed, self.zeropadding)


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
    k = _keynums(w, rng, last)
    k = np.where(inserts, last, k)
    if w.scanlengthdistribution == "constant":  # this project's shorthand for min = max
        sl = np.full(m, w.maxscanlength, np.int32)
    elif w.scanlengthdistribution == "zipfian":  # ZipfianGenerator(min, max): short scans favoured
        sl = gen.Zipfian(w.minscanlength, w.maxscanlength).sample(rng.random(m)).astype(np.int32)
    else:
        sl = rng.integers(w.minscanlength, w.maxscanlength + 1, m).astype(np.int32)
    sl = np.where(ops == SCAN, sl, 0).astype(np.int32)
    pool = rng.bytes(1 << 16)
    size = w.fieldcount * w.fieldlength
    values = [value_for(int(kk), i + 1, size, pool) if o in (UPDATE, INSERT, RMW) else None
              for i, (o, kk) in enumerate(zip(ops.tolist(), k.tolist()))]
    return OpStream(ops, keyspace.names(k), sl, values)


def _keynums(w: Workload, rng: np.random.Generator, last: np.ndarray) -> np.ndarray:
    """CoreWorkload's key chooser for every operation; ``last[i]`` keys exist before op i
    (the acknowledged-insert counter).  As in ``nextKeynum``, a key past the last acknowledged
    insert (or below 0 for ``exponential``) is redrawn."""
    m, rc = len(last), w.recordcount
    if w.requestdistribution == "latest":
        return gen.skewed_latest(rng.random(m), last, w.zipfianconstant)
    if w.requestdistribution == "recent10":  # SIA's D': one of the last <= 10 inserted keys
        return last - 1 - (rng.random(m) * np.minimum(last, 10)).astype(np.int64)

    def sample(idx: np.ndarray) -> np.ndarray:
        u = rng.random(len(idx))
        if w.requestdistribution == "uniform":
            return (u * rc).astype(np.int64)
        if w.requestdistribution == "zipfian":
            # Sized for the expected inserts (x2 fudge factor), bounds inclusive as in YCSB.
            return gen.ScrambledZipfian(0, rc + int(w.operationcount * w.insertproportion * 2.0)).sample(u)
        if w.requestdistribution == "hotspot":
            return gen.hotspot(u, rng.random(len(idx)), 0, rc - 1, w.hotspotdatafraction, w.hotspotopnfraction)
        return last[idx] - 1 - gen.exponential(u, rc, w.exponential_percentile, w.exponential_frac)

    k = sample(np.arange(m))
    while (bad := np.flatnonzero((k >= last) | (k < 0))).size:
        k[bad] = sample(bad)
    return k
