"""Write-ahead log and checkpoints of a durable store.

Layout of a store directory::

    LOCK                      fcntl lock: one process per directory
    wal-<segment>.log         records appended since the checkpoint that covers < segment
    checkpoint-<segment>.ckpt sorted snapshot of every key/value written before <segment>

Record: ``crc32 u32 | length u32 | op u8 | payload``, the CRC over op+payload.  PUT payload
is ``keylen u32 | key | value``, DELETE is ``key``, BATCH is a sequence of
``op u8 | keylen u32 | vallen u32 | key | value`` (one record: all or nothing after a crash).

Sync policies: ``always`` (fdatasync before a write is acknowledged: nothing acknowledged is
lost on SIGKILL or power loss), ``batch`` (written to the OS at once, fdatasync by a
background flusher every ``sync_interval`` s: safe against SIGKILL, may lose the last
interval on power loss), ``off`` (written to the OS, never synced).
"""
from __future__ import annotations

import fcntl
import os
import re
import struct
import threading
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from learnedidx.errors import ConfigError, CorruptLogError, LearnedIdxError, LogRecoveryWarning, StoreLockedError

OP_PUT, OP_DELETE, OP_BATCH = 1, 2, 3
SYNC_POLICIES = ("always", "batch", "off")
_REC = struct.Struct("<IIB")
_SUB = struct.Struct("<BII")
_CKPT_MAGIC = b"LXCK"
_CKPT_HEAD = struct.Struct("<4sIQQQI")  # magic, version, n_keys, key_bytes, val_bytes, crc


@dataclass
class Recovered:
    key_arena: np.ndarray
    key_offsets: np.ndarray
    val_arena: np.ndarray
    val_offsets: np.ndarray
    log: list = field(default_factory=list)


def _encode(op: int, key: bytes, value: bytes | None) -> bytes:
    if op == OP_PUT:
        payload = struct.pack("<I", len(key)) + key + value
    else:
        payload = key
    body = bytes([op]) + payload
    return struct.pack("<II", zlib.crc32(body), len(payload)) + body


class Durability:
    """WAL + checkpoints for one store directory (see module docstring)."""

    def __init__(self, directory: str | os.PathLike, sync: str = "always", sync_interval: float = 0.005) -> None:
        if sync not in SYNC_POLICIES:
            raise ConfigError(f"sync must be one of {SYNC_POLICIES}, not {sync!r}")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sync = sync
        self.sync_interval = float(sync_interval)
        self._lockfd = os.open(self.dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lockfd)
            raise StoreLockedError(f"store directory {self.dir} is open in another process") from None
        self._fd: int | None = None
        self._segment = 0
        self._mutex = threading.Lock()
        self._dirty = False
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None

    # -- files -------------------------------------------------------------------------
    def _segments(self, prefix: str, suffix: str) -> list[int]:
        pat = re.compile(rf"^{prefix}-(\d+){re.escape(suffix)}$")
        return sorted(int(m.group(1)) for p in self.dir.iterdir() if (m := pat.match(p.name)))

    def _wal(self, seg: int) -> Path:
        return self.dir / f"wal-{seg:012d}.log"

    def _ckpt(self, seg: int) -> Path:
        return self.dir / f"checkpoint-{seg:012d}.ckpt"

    def _fsync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- recovery ----------------------------------------------------------------------
    def recover(self) -> Recovered:
        """Load the newest valid checkpoint and the log after it; cut damaged log tails."""
        for tmp in self.dir.glob("*.tmp"):
            tmp.unlink()  # a checkpoint interrupted by a crash
        notes: list[str] = []
        empty_u8 = np.zeros(0, np.uint8)
        rec = Recovered(empty_u8, np.zeros(1, np.int64), empty_u8, np.zeros(1, np.int64))
        ckpts = self._segments("checkpoint", ".ckpt")
        base = 0
        for seg in reversed(ckpts):
            try:
                rec = self._read_checkpoint(self._ckpt(seg))
                base = seg
                break
            except CorruptLogError as exc:
                notes.append(str(exc))
        else:
            if ckpts:
                raise CorruptLogError(f"no readable checkpoint in {self.dir}: {'; '.join(notes)}")
        segs = [seg for seg in self._segments("wal", ".log") if seg >= base]
        for i, seg in enumerate(segs):
            damaged_before = len(notes)
            rec.log.extend(self._read_log(self._wal(seg), notes))
            if len(notes) > damaged_before and i + 1 < len(segs):
                # Replay stops at the last good record: later segments would apply writes after a
                # hole in the history.  They are kept aside, not deleted.
                for later in segs[i + 1:]:
                    path = self._wal(later)
                    os.replace(path, path.with_name(path.name + ".damaged"))
                    notes.append(f"set aside {path.name} (after the damaged record) as {path.name}.damaged")
                self._fsync_dir()
                break
        for n in notes:
            warnings.warn(n, LogRecoveryWarning, stacklevel=2)
        segs = self._segments("wal", ".log")
        self._open_segment(max([base] + segs))
        if self.sync == "batch":
            self._flusher = threading.Thread(target=self._flush_loop, name="learnedidx-wal-flush", daemon=True)
            self._flusher.start()
        return rec

    def _read_checkpoint(self, path: Path) -> Recovered:
        data = path.read_bytes()
        if len(data) < _CKPT_HEAD.size:
            raise CorruptLogError(f"checkpoint {path.name} is truncated")
        magic, version, n, kb, vb, crc = _CKPT_HEAD.unpack_from(data)
        body = memoryview(data)[_CKPT_HEAD.size:]
        if magic != _CKPT_MAGIC or version != 1 or len(body) != 16 * (n + 1) + kb + vb or zlib.crc32(body) != crc:
            raise CorruptLogError(f"checkpoint {path.name} is corrupt")
        o = 0
        koff = np.frombuffer(body, np.int64, n + 1, o).copy(); o += 8 * (n + 1)
        karena = np.frombuffer(body, np.uint8, kb, o).copy(); o += kb
        voff = np.frombuffer(body, np.int64, n + 1, o).copy(); o += 8 * (n + 1)
        varena = np.frombuffer(body, np.uint8, vb, o).copy()
        return Recovered(karena, koff, varena, voff)

    def _read_log(self, path: Path, notes: list[str]) -> list:
        data = path.read_bytes()
        out: list = []
        pos = 0
        while pos < len(data):
            good = pos
            try:
                crc, length, op = _REC.unpack_from(data, pos)
                body = data[pos + 8: pos + 9 + length]
                if len(body) != 1 + length or zlib.crc32(body) != crc:
                    raise ValueError("checksum")
                payload = body[1:]
                if op == OP_PUT:
                    (kl,) = struct.unpack_from("<I", payload)
                    out.append((OP_PUT, payload[4:4 + kl], payload[4 + kl:]))
                elif op == OP_DELETE:
                    out.append((OP_DELETE, payload, None))
                elif op == OP_BATCH:
                    out.extend(_decode_batch(payload))
                else:
                    raise ValueError("op")
                pos += 9 + length
            except (struct.error, ValueError):
                notes.append(f"cut damaged log tail of {path.name} at byte {good} ({len(data) - good} bytes dropped)")
                with open(path, "r+b") as f:
                    f.truncate(good)
                    os.fsync(f.fileno())
                break
        return out

    # -- logging -----------------------------------------------------------------------
    def _open_segment(self, seg: int) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._segment = seg
        self._fd = os.open(self._wal(seg), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._fsync_dir()

    def _append(self, blob: bytes) -> None:
        with self._mutex:
            if self._fd is None:
                raise LearnedIdxError("durability layer used before recover() or after close()")
            os.write(self._fd, blob)
            if self.sync == "always":
                os.fdatasync(self._fd)
            else:
                self._dirty = True

    def log_put(self, key: bytes, value: bytes) -> None:
        self._append(_encode(OP_PUT, key, value))

    def log_delete(self, key: bytes) -> None:
        self._append(_encode(OP_DELETE, key, None))

    def log_batch(self, records: Sequence[tuple[int, bytes, bytes | None]]) -> None:
        parts = []
        for op, k, v in records:
            v = v if v is not None else b""
            parts.append(_SUB.pack(op, len(k), len(v)) + k + v)
        payload = b"".join(parts)
        body = bytes([OP_BATCH]) + payload
        self._append(struct.pack("<II", zlib.crc32(body), len(payload)) + body)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.sync_interval):
            with self._mutex:
                if self._dirty and self._fd is not None:
                    os.fdatasync(self._fd)
                    self._dirty = False

    def log_bytes(self) -> int:
        return sum(self._wal(s).stat().st_size for s in self._segments("wal", ".log"))

    # -- checkpoints -------------------------------------------------------------------
    def start_checkpoint(self) -> int:
        """Rotate to a new log segment (call with the store's write lock held)."""
        with self._mutex:
            if self._fd is not None and self.sync != "off":
                os.fdatasync(self._fd)
            self._open_segment(self._segment + 1)
            return self._segment

    def finish_checkpoint(self, segment: int, key_arena, key_offsets, val_arena, val_offsets) -> None:
        """Write the snapshot covering every segment < ``segment``, then drop those segments."""
        n = len(key_offsets) - 1
        body = b"".join(
            np.ascontiguousarray(a).tobytes()
            for a in (np.asarray(key_offsets, np.int64), np.asarray(key_arena, np.uint8),
                      np.asarray(val_offsets, np.int64), np.asarray(val_arena, np.uint8))
        )
        head = _CKPT_HEAD.pack(_CKPT_MAGIC, 1, n, len(key_arena), len(val_arena), zlib.crc32(body))
        tmp = self.dir / f"checkpoint-{segment:012d}.ckpt.tmp"
        with open(tmp, "wb") as f:
            f.write(head)
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._ckpt(segment))
        self._fsync_dir()
        for s in self._segments("wal", ".log"):
            if s < segment:
                self._wal(s).unlink()
        for s in self._segments("checkpoint", ".ckpt"):
            if s < segment:
                self._ckpt(s).unlink()

    def close(self) -> None:
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        with self._mutex:
            if self._fd is not None:
                if self.sync != "off":
                    os.fdatasync(self._fd)
                os.close(self._fd)
                self._fd = None
        if self._lockfd >= 0:
            fcntl.flock(self._lockfd, fcntl.LOCK_UN)
            os.close(self._lockfd)
            self._lockfd = -1


def _decode_batch(payload: bytes) -> list:
    out = []
    pos = 0
    while pos < len(payload):
        op, kl, vl = _SUB.unpack_from(payload, pos)
        pos += _SUB.size
        k = payload[pos:pos + kl]
        v = payload[pos + kl:pos + kl + vl]
        if len(k) != kl or len(v) != vl or op not in (OP_PUT, OP_DELETE):
            raise ValueError("batch")
        pos += kl + vl
        out.append((op, k, v if op == OP_PUT else None))
    return out
