"""A load and a run stream in one binary file, for peers that are separate programs
(the SIndex driver, ``sindex_driver.cc``): they execute exactly the operations, batches
and values the runner gives the in-process peers.

Layout (little-endian; ``keys`` = n ``u16`` lengths, then the n keys' bytes back to back)::

    b"LIDXOPS1"
    u64 V, V u32 lengths, then the bytes of V values  (distinct digest views, by value id)
    u64 N, keys, N u32 value ids                       (load phase: writes)
    u64 M, M u8 op codes, keys, M u32 args             (run phase: op codes of spec.py;
                                                        arg = value id of a write, length
                                                        of a scan, else 0)
    u64 B, B u32 batch sizes                           (the runner's batches, in order)

A value is stored as what the runner's digest reads of it (``view``: all of a short value,
the length and both ends of a long one), once per distinct view: the program returns
value ids, and the digest of what it read equals the runner's.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from learnedidx.errors import WorkloadError
from learnedidx.workloads.spec import INSERT, RMW, SCAN, UPDATE, OpStream

MAGIC = b"LIDXOPS1"
# The driver's protocol, printed by ``sindex_driver --version``: this file's layout and the
# reports it prints (2: a run's report carries the time it spent finishing deferred work; 3:
# in batch mode and in the load, an operation's latency is its batch's, not a share of it).
FORMAT = 3
MAX_KEY = 0xFFFF
_WRITES = (UPDATE, INSERT, RMW)


@dataclass
class StreamFile:
    """What a stream file holds (see :func:`read`)."""

    values: list[bytes]  # digest views, by value id
    load_keys: list[bytes]
    load_values: np.ndarray  # u32 value ids
    ops: np.ndarray  # u8 op codes
    run_keys: list[bytes]
    args: np.ndarray  # u32: value id of a write, length of a scan, else 0
    batches: np.ndarray  # u32 batch sizes


def _keys(keys: Sequence[bytes]) -> bytes:
    lens = np.fromiter(map(len, keys), np.int64, len(keys))
    if len(keys) and int(lens.max()) > MAX_KEY:
        raise WorkloadError(f"a key of {int(lens.max()):,} bytes: stream files hold keys of at most {MAX_KEY:,}")
    return lens.astype("<u2").tobytes() + b"".join(keys)


def write(path: str | Path, load: OpStream, run: OpStream, batches: Sequence[int],
          view: Callable[[bytes], bytes]) -> None:
    """Write ``load`` (inserts only) and ``run``, cut into ``batches`` (sizes summing to the
    run's length), storing each value as ``view(value)``."""
    if sum(batches) != len(run.ops) or any(b <= 0 for b in batches):
        raise ValueError("batches must be positive sizes that sum to the run's length")
    if len(load.ops) and not bool((load.ops == INSERT).all()):
        raise WorkloadError("a load stream holds inserts only")
    ids: dict[bytes, int] = {}

    def vid(v: bytes) -> int:
        return ids.setdefault(view(v), len(ids))

    load_ids = np.fromiter((vid(v) for v in load.values), np.uint32, len(load.values))
    ops = run.ops.astype(np.uint8)
    args = np.where(ops == SCAN, run.scan_lengths, 0).astype(np.uint32)
    for i in np.flatnonzero(np.isin(ops, _WRITES)).tolist():
        args[i] = vid(run.values[i])
    vals = list(ids)
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", len(vals)))
        f.write(np.fromiter(map(len, vals), "<u4", len(vals)).tobytes() + b"".join(vals))
        f.write(struct.pack("<Q", len(load.keys)) + _keys(load.keys) + load_ids.astype("<u4").tobytes())
        f.write(struct.pack("<Q", len(ops)) + ops.tobytes() + _keys(run.keys) + args.astype("<u4").tobytes())
        f.write(struct.pack("<Q", len(batches)) + np.asarray(batches, "<u4").tobytes())


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise WorkloadError("the stream file is truncated")
        self.at += n
        return self.data[self.at - n:self.at]

    def array(self, dtype: str, n: int) -> np.ndarray:
        return np.frombuffer(self.take(n * np.dtype(dtype).itemsize), dtype)

    def count(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def blobs(self, n: int, width: str) -> list[bytes]:
        lens = self.array(width, n).astype(np.int64)
        data = self.take(int(lens.sum()))
        ends = np.cumsum(lens).tolist()
        return [data[e - ln:e] for e, ln in zip(ends, lens.tolist())]


def read(path: str | Path) -> StreamFile:
    """Read a file :func:`write` wrote (the check of the format the program reads)."""
    c = _Cursor(Path(path).read_bytes())
    if c.take(len(MAGIC)) != MAGIC:
        raise WorkloadError(f"{path} is not a stream file")
    values = c.blobs(c.count(), "<u4")
    n = c.count()
    load_keys = c.blobs(n, "<u2")
    load_values = c.array("<u4", n)
    m = c.count()
    ops = c.array("u1", m)
    run_keys = c.blobs(m, "<u2")
    args = c.array("<u4", m)
    batches = c.array("<u4", c.count())
    if c.at != len(c.data):
        raise WorkloadError("trailing bytes after the stream")
    return StreamFile(values, load_keys, load_values, ops, run_keys, args, batches)
