"""The write-ahead log's records: encoding, and reading a segment back.

Record: ``crc32 u32 | length u32 | op u8 | payload`` (little-endian), the CRC-32 over
``op + payload``, ``length`` the payload's length.  PUT payload is ``keylen u32 | key |
value``, DELETE is ``key``, BATCH a sequence of ``op u8 | keylen u32 | vallen u32 | key |
value`` (one record: applied entirely or not at all after a crash).

Reading a segment stops at the first record that is incomplete, fails its CRC or does not
decode; :func:`next_record` then tells a torn tail (nothing valid after it: an interrupted
last write) from damage inside the log (a valid record follows).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from learnedidx.errors import RecordTooLargeError

OP_PUT, OP_DELETE, OP_BATCH = 1, 2, 3
HEADER = struct.Struct("<IIB")  # crc, payload length, op
SUB = struct.Struct("<BII")  # a BATCH item: op, key length, value length
_U32 = struct.Struct("<I")
#: The longest payload the ``length u32`` field can describe.
MAX_PAYLOAD = 0xFFFF_FFFF


def _too_large(size: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"a log record holds at most {MAX_PAYLOAD} bytes of keys and values "
                               f"(4 GiB - 1), this write needs {size}")


_CRC_LEN = struct.Struct("<II")
_PUT = struct.Struct("<BI")  # op, key length: the start of a PUT's body


def _record(body: bytes) -> bytes:
    """The record of ``body`` (op + payload)."""
    return _CRC_LEN.pack(zlib.crc32(body), len(body) - 1) + body


def encode_put(key: bytes, value: bytes) -> bytes:
    """The PUT record of one write; :class:`RecordTooLargeError` past the format's limit."""
    body = _PUT.pack(OP_PUT, len(key)) + key + value
    if len(body) > MAX_PAYLOAD + 1:
        raise _too_large(len(body) - 1)
    return _record(body)


def encode_delete(key: bytes) -> bytes:
    return _record(bytes((OP_DELETE,)) + key)


def encode_batch(records: Sequence[tuple[int, bytes, bytes | None]]) -> bytes:
    """The BATCH record of ``(op, key, value or None)`` items, checked against the
    format's limit before anything is copied."""
    size = sum(SUB.size + len(k) + (len(v) if v is not None else 0) for _, k, v in records)
    if size > MAX_PAYLOAD:
        raise _too_large(size)
    parts = []
    for op, k, v in records:
        v = v if v is not None else b""
        parts.append(SUB.pack(op, len(k), len(v)) + k + v)
    return _record(bytes((OP_BATCH,)) + b"".join(parts))


@dataclass
class Segment:
    """What reading one segment found: its writes in order, and where the valid records
    end (``end``: the file's size when every record is valid)."""

    writes: list  # (op, key, value or None)
    end: int
    size: int
    reason: str = ""  # why the record at ``end`` is not valid ("" when end == size)

    @property
    def damaged(self) -> bool:
        return self.end < self.size


def read_segment(data: bytes, max_key_len: int) -> Segment:
    """Decode the records of one segment, up to the first that is not valid."""
    writes: list = []
    pos, n = 0, len(data)
    while pos < n:
        reason = _decode(data, pos, max_key_len, writes)
        if reason:
            return Segment(writes, pos, n, reason)
        pos += HEADER.size + _U32.unpack_from(data, pos + 4)[0]
    return Segment(writes, n, n)


def _decode(data: bytes, pos: int, max_key_len: int, out: list) -> str:
    """Append the writes of the record at ``pos`` to ``out``; or say why it is not valid."""
    if pos + HEADER.size > len(data):
        return "incomplete record header"
    crc, length, op = HEADER.unpack_from(data, pos)
    body = data[pos + 8: pos + 9 + length]
    if len(body) != 1 + length:
        return "incomplete record"
    if zlib.crc32(body) != crc:
        return "checksum mismatch"
    payload = body[1:]
    items: list = []
    if op == OP_PUT:
        if length < _U32.size:
            return "PUT record too short"
        (kl,) = _U32.unpack_from(payload)
        if kl > length - _U32.size:
            return "PUT key longer than its record"
        items.append((OP_PUT, payload[4:4 + kl], payload[4 + kl:]))
    elif op == OP_DELETE:
        items.append((OP_DELETE, payload, None))
    elif op == OP_BATCH:
        p = 0
        while p < length:
            if p + SUB.size > length:
                return "BATCH item header cut short"
            sop, kl, vl = SUB.unpack_from(payload, p)
            p += SUB.size
            if sop not in (OP_PUT, OP_DELETE) or p + kl + vl > length:
                return "BATCH item does not decode"
            items.append((sop, payload[p:p + kl], payload[p + kl:p + kl + vl] if sop == OP_PUT else None))
            p += kl + vl
    else:
        return f"unknown op {op}"
    for _, k, _ in items:
        if not 1 <= len(k) <= max_key_len:
            return f"key of {len(k)} bytes outside 1..{max_key_len}"
    out.extend(items)
    return ""


def _u32_at(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return (a[idx].astype(np.uint64) | a[idx + 1].astype(np.uint64) << 8 | a[idx + 2].astype(np.uint64) << 16
            | a[idx + 3].astype(np.uint64) << 24)


def next_record(data: bytes, start: int, max_key_len: int, chunk: int = 1 << 20) -> int:
    """The first offset >= ``start`` where a valid record starts (complete, CRC and
    contents right), or -1.  Every offset is tried: after damage, the record boundaries
    are unknown.  Offsets are screened in numpy by what a record's header must satisfy
    (an op, a length within the file, a key length in 1..``max_key_len``), and only the
    few that pass are decoded."""
    n = len(data)
    if n - start < HEADER.size:
        return -1
    a = np.zeros(n + 32, np.uint8)  # padded: the screen reads a few bytes past any offset
    a[:n] = np.frombuffer(data, np.uint8)
    mk = np.uint64(max_key_len)
    for lo in range(start, n - HEADER.size + 1, chunk):
        q = np.arange(lo, min(lo + chunk, n - HEADER.size + 1), dtype=np.int64)
        length = _u32_at(a, q + 4)
        op = a[q + 8]
        fits = q.astype(np.uint64) + np.uint64(HEADER.size) + length <= np.uint64(n)
        k1 = _u32_at(a, q + 9)  # PUT: the key length
        put = (op == OP_PUT) & (k1 >= 1) & (k1 <= mk) & (k1 + np.uint64(4) <= length)
        delete = (op == OP_DELETE) & (length >= 1) & (length <= mk)
        sop, skl, svl = a[q + 9], _u32_at(a, q + 10), _u32_at(a, q + 14)
        batch = (op == OP_BATCH) & ((length == 0) | (((sop == OP_PUT) | (sop == OP_DELETE)) & (skl >= 1)
                                                     & (skl <= mk) & (np.uint64(SUB.size) + skl + svl <= length)))
        for pos in (q[fits & (put | delete | batch)]).tolist():
            if not _decode(data, pos, max_key_len, []):
                return pos
    return -1
