"""The checkpoint file: every key and value of a store at one moment, sorted, in chunks.

Layout (little-endian)::

    head    magic "LXCK" | version u32 (2)
    chunk   n u64 | key bytes u64 | value bytes u64 | body crc32 u32 | crc32 of these 28 bytes u32
            key offsets (n + 1) i64 | keys | value offsets (n + 1) i64 | values
    ...     (one chunk per piece the writer was given, in key order)
    foot    magic "LXEN" | chunks u64 | n u64 | key bytes u64 | value bytes u64 | crc32 of these 36 bytes u32

Offsets inside a chunk start at 0.  The writer streams the chunks it is given (no copy of
the whole data), the reader fills arrays allocated once from the footer's totals.  Loading
checks everything a reader relies on: sizes that add up to the file's, CRCs, offsets that
start at 0, never decrease and end at the arena's length, keys of 1..max_key_len bytes, in
strictly increasing order across the whole file; anything else is
:class:`~learnedidx.errors.CorruptLogError` naming the file and offset.
"""
from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
from numba import njit

from learnedidx.errors import CorruptLogError, LearnedIdxError
from learnedidx.index import fileio

MAGIC, END_MAGIC, VERSION = b"LXCK", b"LXEN", 2
HEAD = struct.Struct("<4sI")
CHUNK = struct.Struct("<QQQII")
FOOT = struct.Struct("<4sQQQQI")

#: ``(key_arena, key_offsets, value_arena, value_offsets)``: sorted keys and their values.
#: Offsets may start anywhere (a slice of larger arrays): the keys are
#: ``key_arena[key_offsets[i]:key_offsets[i + 1]]``.  Arenas: uint8 arrays or bytes-like.
Chunk = tuple[Any, Any, Any, Any]


@njit(cache=True, nogil=True)
def first_unsorted(arena: np.ndarray, offsets: np.ndarray) -> int:  # pragma: no cover - compiled
    """The first ``i`` whose key is not strictly greater than key ``i - 1``, or -1."""
    for i in range(1, len(offsets) - 1):
        a0, b0 = offsets[i - 1], offsets[i]
        la, lb = offsets[i] - a0, offsets[i + 1] - b0
        m = min(la, lb)
        j = 0
        while j < m and arena[a0 + j] == arena[b0 + j]:
            j += 1
        if j < m:
            if arena[a0 + j] > arena[b0 + j]:
                return i
        elif la >= lb:
            return i
    return -1


def _u8(a: Any) -> np.ndarray:
    return a if isinstance(a, np.ndarray) and a.dtype == np.uint8 else np.frombuffer(a, np.uint8)


def _normalized(chunk: Chunk) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A chunk with offsets from 0 over exactly its bytes."""
    ka, ko, va, vo = chunk
    ko = np.asarray(ko, np.int64)
    vo = np.asarray(vo, np.int64)
    if len(ko) != len(vo) or len(ko) < 1:
        raise LearnedIdxError(f"checkpoint chunk with {len(ko)} key offsets and {len(vo)} value offsets")
    ka = np.ascontiguousarray(_u8(ka)[ko[0]:ko[-1]])
    va = np.ascontiguousarray(_u8(va)[vo[0]:vo[-1]])
    return ka, ko - ko[0], va, vo - vo[0]


def _check(ka: np.ndarray, ko: np.ndarray, va: np.ndarray, vo: np.ndarray, max_key_len: int) -> str:
    """Why a chunk (offsets from 0) is not what a reader may rely on; "" when it is."""
    dk, dv = np.diff(ko), np.diff(vo)
    if ko[0] != 0 or ko[-1] != len(ka) or vo[0] != 0 or vo[-1] != len(va):
        return "offsets do not span their arena"
    if len(dk) and (dk.min() < 1 or dk.max() > max_key_len):
        return f"a key length outside 1..{max_key_len}"
    if len(dv) and dv.min() < 0:
        return "value offsets decrease"
    i = first_unsorted(ka, ko)
    if i >= 0:
        return f"key {i} is not greater than key {i - 1}"
    return ""


def write(fd: int, path: Path, chunks: Iterable[Chunk], max_key_len: int) -> None:
    """Write a checkpoint of ``chunks`` (see :data:`Chunk`; each sorted, each after the
    previous) to ``fd``.  A chunk that breaks the order or the offsets' rules is a bug of
    the caller: :class:`LearnedIdxError` before it is written."""
    fileio.write_all(fd, HEAD.pack(MAGIC, VERSION), path)
    count = n = kb = vb = 0
    last: bytes | None = None
    for chunk in chunks:
        ka, ko, va, vo = _normalized(chunk)
        nc = len(ko) - 1
        if nc == 0:
            continue
        why = _check(ka, ko, va, vo, max_key_len)
        first = ka[:ko[1]].tobytes()
        if not why and last is not None and not last < first:
            why = "its first key is not greater than the previous chunk's last"
        if why:
            raise LearnedIdxError(f"refusing to write checkpoint {path.name}: chunk {count}: {why}")
        last = ka[ko[-2]:].tobytes()
        parts = [ko, ka, vo, va]
        crc = 0
        for p in parts:
            crc = zlib.crc32(p, crc)
        sizes = struct.pack("<QQQI", nc, len(ka), len(va), crc)
        fileio.write_all(fd, sizes + struct.pack("<I", zlib.crc32(sizes)), path)
        for p in parts:
            fileio.write_all(fd, p, path)
        count, n, kb, vb = count + 1, n + nc, kb + len(ka), vb + len(va)
    foot = struct.pack("<4sQQQQ", END_MAGIC, count, n, kb, vb)
    fileio.write_all(fd, foot + struct.pack("<I", zlib.crc32(foot)), path)


class _Reader:
    def __init__(self, f: Any, path: Path) -> None:
        self.f, self.path, self.pos = f, path, 0

    def corrupt(self, why: str, offset: int | None) -> CorruptLogError:
        where = "" if offset is None else f" at byte {offset}"
        return CorruptLogError(f"checkpoint {self.path.name} is damaged{where}: {why}", self.path, offset)

    def into(self, arr: np.ndarray) -> np.ndarray:
        view = memoryview(arr).cast("B")
        if self.f.readinto(view) != len(view):
            raise self.corrupt("the file ends early", self.pos)
        self.pos += len(view)
        return arr

    def struct(self, s: struct.Struct) -> tuple:
        return s.unpack(self.into(np.empty(s.size, np.uint8)).tobytes())


def read(path: Path, max_key_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(key_arena, key_offsets, value_arena, value_offsets)`` of a checkpoint, every
    rule of the module docstring checked; :class:`CorruptLogError` otherwise."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise fileio.io_error(exc, "opening", path) from exc
    with f:
        size = os.fstat(f.fileno()).st_size
        r = _Reader(f, path)
        if size < HEAD.size + FOOT.size:
            raise r.corrupt(f"{size} bytes is too short for a checkpoint", 0)
        magic, version = r.struct(HEAD)
        if magic != MAGIC or version != VERSION:
            raise r.corrupt(f"not a version {VERSION} checkpoint (magic {magic!r}, version {version})", 0)
        f.seek(size - FOOT.size)
        r.pos = size - FOOT.size
        emagic, count, n, kb, vb, fcrc = r.struct(FOOT)
        if emagic != END_MAGIC or zlib.crc32(struct.pack("<4sQQQQ", emagic, count, n, kb, vb)) != fcrc:
            raise r.corrupt("footer damaged", size - FOOT.size)
        if HEAD.size + FOOT.size + count * (CHUNK.size + 16) + 16 * n + kb + vb != size:
            raise r.corrupt(f"the footer's sizes do not add up to the file's {size} bytes", size - FOOT.size)
        karena, varena = np.empty(kb, np.uint8), np.empty(vb, np.uint8)
        koff, voff = np.zeros(n + 1, np.int64), np.zeros(n + 1, np.int64)
        f.seek(HEAD.size)
        r.pos = HEAD.size
        ni = ki = vi = 0
        for _ in range(count):
            at = r.pos
            nc, kc, vc, bcrc, hcrc = r.struct(CHUNK)
            if zlib.crc32(struct.pack("<QQQI", nc, kc, vc, bcrc)) != hcrc:
                raise r.corrupt("chunk header damaged", at)
            if nc < 1 or ni + nc > n or ki + kc > kb or vi + vc > vb:
                raise r.corrupt("chunk sizes exceed the footer's totals", at)
            ko = r.into(np.empty(nc + 1, np.int64))
            ka = r.into(karena[ki:ki + kc])
            vo = r.into(np.empty(nc + 1, np.int64))
            va = r.into(varena[vi:vi + vc])
            crc = 0
            for p in (ko, ka, vo, va):
                crc = zlib.crc32(p, crc)
            if crc != bcrc:
                raise r.corrupt("chunk checksum mismatch", at)
            why = _check(ka, ko, va, vo, max_key_len)
            if why:
                raise r.corrupt(why, at)
            koff[ni:ni + nc + 1] = ko + ki
            voff[ni:ni + nc + 1] = vo + vi
            ni, ki, vi = ni + nc, ki + kc, vi + vc
        if (ni, ki, vi) != (n, kb, vb):
            raise r.corrupt("the chunks do not add up to the footer's totals", size - FOOT.size)
        i = first_unsorted(karena, koff)
        if i >= 0:
            raise r.corrupt(f"key {i} is not greater than key {i - 1} (at a chunk boundary)", None)
    return karena, koff, varena, voff


def chunks_of(key_arena: Any, key_offsets: Any, values: list) -> Iterator[Chunk]:
    """Chunks of sorted keys (an arena and offsets) and their values as a list of
    ``bytes``, joining the values a slice at a time instead of all at once."""
    step = 1 << 16
    ko = np.asarray(key_offsets, np.int64)
    for s in range(0, len(values), step):
        vals = values[s:s + step]
        vo = np.zeros(len(vals) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, vals), np.int64, len(vals)), out=vo[1:])
        yield key_arena, ko[s:s + len(vals) + 1], np.frombuffer(b"".join(vals), np.uint8), vo
