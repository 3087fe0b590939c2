"""Twitter cache traces (Yang et al., OSDI 2020; CC BY 4.0): reader, synthetic look-alikes, replay.

Real trace lines: ``timestamp,anonymized key,key size,value size,client id,operation,TTL``.
Keys may contain commas, so the key is everything between the first field and the last five.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from learnedidx.errors import TraceFormatError, WorkloadError
from learnedidx.workloads.spec import DELETE, INSERT, READ, OpStream

OP_READ, OP_WRITE, OP_DELETE = "read", "write", "delete"
OPERATIONS = {
    "get": OP_READ, "gets": OP_READ,
    "set": OP_WRITE, "add": OP_WRITE, "replace": OP_WRITE, "cas": OP_WRITE, "append": OP_WRITE,
    "prepend": OP_WRITE, "incr": OP_WRITE, "decr": OP_WRITE,
    "delete": OP_DELETE,
}


@dataclass(frozen=True)
class Request:
    timestamp: int
    key: bytes
    key_size: int
    value_size: int
    client: int
    op: str  # the trace's operation name
    kind: str  # read / write / delete
    ttl: int


def _open_text(path: Path) -> io.BufferedReader:
    if path.suffix == ".zst":
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")))
    return open(path, "rb")


def read_trace(path: str | Path, *, on_error: str = "raise",
               on_skip: Callable[[int, str], None] | None = None) -> Iterator[Request]:
    """Stream the requests of a trace file (plain or ``.zst``) in constant memory.

    A malformed line raises TraceFormatError with its line number (``on_error="raise"``) or,
    with ``on_error="skip"``, is skipped and reported as ``on_skip(lineno, reason)``.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError("on_error must be 'raise' or 'skip'")
    path = Path(path)
    with _open_text(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip(b"\r\n")
            if not line:
                continue
            try:
                yield _parse(line)
            except (ValueError, IndexError) as exc:
                if on_error == "raise":
                    raise TraceFormatError(lineno, f"{exc}: {line[:80]!r}") from None
                if on_skip is not None:
                    on_skip(lineno, f"{exc}: {line[:80]!r}")


def _parse(line: bytes) -> Request:
    first = line.index(b",")
    tail = line[first + 1:].rsplit(b",", 5)
    if len(tail) != 6:
        raise ValueError("expected 7 comma-separated fields")
    key, ksize, vsize, client, op, ttl = tail
    if not key:
        raise ValueError("empty key")
    opname = op.decode("ascii", "replace")
    kind = OPERATIONS.get(opname)
    if kind is None:
        raise ValueError(f"unknown operation {opname!r}")
    return Request(int(line[:first]), key, int(ksize), int(vsize), int(client), opname, kind, int(ttl))


@dataclass(frozen=True)
class ClusterStats:
    """The statistics of one cluster that the synthetic generator reproduces."""

    name: str
    key_size: int
    value_size: int
    ops: dict
    zipf_alpha: float
    one_hit_wonder: float  # fraction of keys requested once
    ttl: int = 300


#: Presets of the clusters SIA used (from stat_2020Mar.md), so generation works without it.
PRESETS = {
    "12": ClusterStats("cluster12", 44, 1030, {"set": 0.80, "get": 0.20}, 0.3048, 0.8143, 300),
    "15": ClusterStats("cluster15", 18, 102, {"set": 1.00}, 0.0242, 0.9957, 30),
    "31": ClusterStats("cluster31", 41, 15, {"set": 0.94, "get": 0.06}, 0.0, 0.9406, 60),
    "37": ClusterStats("cluster37", 72, 20134, {"set": 0.37, "get": 0.63}, 0.4251, 0.1488, 20),
}


def parse_stats_table(path: str | Path) -> dict[str, ClusterStats]:
    """Parse ``stat_2020Mar.md`` (Markdown table) into ClusterStats by cluster number."""
    out = {}
    for line in Path(path).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 14 or not re.fullmatch(r"cluster\d+", cells[0]):
            continue
        try:
            ops = {k: float(v) for k, v in (p.split(":") for p in cells[12].split())}
            ttl = cells[9].split(",")[0].split(":")[0]
            out[cells[0][7:]] = ClusterStats(cells[0], int(cells[3]), int(cells[4]), ops, float(cells[13]),
                                             float(cells[7]) / 100.0, _ttl_seconds(ttl))
        except ValueError:
            continue  # clusters with N/A statistics
    return out


def _ttl_seconds(text: str) -> int:
    m = re.fullmatch(r"([\d.]+)([smhd])", text)
    if not m:
        return 0
    return int(float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])


def cluster_stats(cluster: str, stats_file: str | Path | None = None) -> ClusterStats:
    cluster = cluster.removeprefix("cluster")
    if stats_file is not None:
        table = parse_stats_table(stats_file)
        if cluster in table:
            return table[cluster]
    if cluster in PRESETS:
        return PRESETS[cluster]
    raise WorkloadError(f"no statistics for cluster {cluster}: pass the stat_2020Mar.md file")


def _key_text(i: int, size: int) -> str:
    # Base-64-like anonymized keys of the cluster's size; some contain commas, like real ones.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
    out = []
    x = (i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    for j in range(size):
        out.append(alphabet[(x >> (6 * (j % 10))) & 63])
        if j % 10 == 9:
            x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
    if i % 97 == 0 and size > 4:
        out[size // 2] = ","
    return "".join(out)


def generate(stats: ClusterStats, n_requests: int, out: str | Path, seed: int = 0) -> int:
    """Write a synthetic trace in the real format; returns the number of distinct keys."""
    rng = np.random.default_rng(seed)
    ops = list(stats.ops)
    p = np.array([stats.ops[o] for o in ops])
    op_idx = rng.choice(len(ops), n_requests, p=p / p.sum())
    # Popular keys follow Zipf(alpha) over a pool; one-hit wonders get fresh keys.
    n_pool = max(1, int(n_requests * (1 - stats.one_hit_wonder) / 2) + 1)
    ranks = np.arange(1, n_pool + 1, dtype=np.float64)
    w = ranks ** -stats.zipf_alpha
    popular = rng.choice(n_pool, n_requests, p=w / w.sum())
    fresh = rng.random(n_requests) < stats.one_hit_wonder
    ids = np.where(fresh, n_pool + np.arange(n_requests), popular)
    path = Path(out)
    if path.suffix == ".zst":
        import zstandard

        raw = open(path, "wb")
        f = zstandard.ZstdCompressor().stream_writer(raw)
    else:
        raw = None
        f = open(path, "wb")
    with f:
        buf = []
        for t, (i, o) in enumerate(zip(ids.tolist(), op_idx.tolist())):
            key = _key_text(i, stats.key_size)
            buf.append(f"{t // 1000},{key},{stats.key_size},{stats.value_size},{i % 64},{ops[o]},{stats.ttl}\n")
            if len(buf) >= 4096:
                f.write("".join(buf).encode())
                buf.clear()
        f.write("".join(buf).encode())
    if raw is not None:
        raw.close()
    return int(len(np.unique(ids)))


def replay_streams(path: str | Path, load_requests: int, *, on_error: str = "skip",
                   on_skip: Callable[[int, str], None] | None = None,
                   max_value: int = 4096) -> tuple[OpStream, OpStream]:
    """(load, run): the distinct keys of the first ``load_requests`` requests, then the rest.

    Writes become inserts of a value of the request's size (capped at ``max_value``), reads
    reads and deletes deletes.  ``on_error``/``on_skip`` as for :func:`read_trace`.
    """
    load_keys: dict[bytes, int] = {}
    ops, keys, vals = [], [], []
    pool = np.random.default_rng(0).bytes(max_value + 1)
    kinds = {OP_READ: READ, OP_WRITE: INSERT, OP_DELETE: DELETE}
    for n, req in enumerate(read_trace(path, on_error=on_error, on_skip=on_skip)):
        if n < load_requests:
            load_keys.setdefault(req.key, min(req.value_size, max_value))
            continue
        ops.append(kinds[req.kind])
        keys.append(req.key)
        vals.append(pool[:min(req.value_size, max_value)] if req.kind == OP_WRITE else None)
    lk = list(load_keys)
    load = OpStream(np.full(len(lk), INSERT, np.int8), lk, np.zeros(len(lk), np.int32),
                    [pool[:load_keys[k]] for k in lk])
    run = OpStream(np.array(ops, np.int8), keys, np.zeros(len(ops), np.int32), vals)
    return load, run
