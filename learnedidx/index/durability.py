"""The files of a durable store: the directory and its lock, the write-ahead log with its
sync policy, checkpoints, and recovery when the store is opened (docs/store.md, Durability).

Layout of a store directory (created mode 0700, every file 0600)::

    LOCK                      fcntl lock: one process per directory
    STORE                     what the files depend on: format version, max_key_len (JSON)
    wal-<segment>.log         records appended since the checkpoint that covers < segment
    checkpoint-<segment>.ckpt every key/value written before <segment> (checkpointfile)
    aside-<time>/             what point-in-time recovery cut from the history

Record format: :mod:`learnedidx.index.wal`; checkpoint format:
:mod:`learnedidx.index.checkpointfile`; every file call: :mod:`learnedidx.index.fileio`.

The contract with the store
---------------------------
* ``Durability(directory, sync, sync_interval, max_key_len, recovery)`` takes the lock and
  checks ``max_key_len`` against ``STORE`` (:class:`ConfigError` when smaller than a value
  the store was opened with).  Then :meth:`recover` once: the newest checkpoint's arrays
  and the log's writes after it.
* ``log_put`` / ``log_delete`` / ``log_batch`` before a write is applied: when they return
  the write is durable per the sync policy.  They raise :class:`RecordTooLargeError`
  (nothing written, the log stays usable), :class:`StoreIOError` (the write or its sync
  failed: the log is *failed*), :class:`LogFailedError` (it failed earlier) or
  :class:`StoreClosedError`.  A failed log refuses every write until a checkpoint
  started after the failure's segment finishes (it holds every applied write and
  supersedes the damaged segment) or the store is reopened: an fsync that failed is never
  retried and trusted.
* ``start_checkpoint() -> segment`` with the store's writer lock held, at the moment the
  checkpoint is an image of: later writes go to the new segment ``segment``.
  ``finish_checkpoint(segment, chunks)`` then, without the lock: ``chunks`` an iterable of
  :data:`~learnedidx.index.checkpointfile.Chunk` (sorted keys with their values, each chunk
  after the previous one), streamed to the file; when it returns the checkpoint is durable
  and the files it covers are gone.  It raises :class:`StoreIOError` when the file cannot be
  written (the log is intact: nothing is lost, a later checkpoint tries again).
* :meth:`close` syncs and releases the lock, also when it raises.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from learnedidx.errors import (ConfigError, CorruptLogError, LogFailedError, LogRecoveryWarning, StoreClosedError,
                               StoreIOError, StoreLockedError)
from learnedidx.index import checkpointfile, fileio, wal
from learnedidx.index.fileio import io_error
from learnedidx.index.options import RECOVERY_MODES, SYNC_POLICIES
from learnedidx.index.wal import OP_BATCH, OP_DELETE, OP_PUT  # noqa: F401 - the store's names for ops

log = logging.getLogger(__name__)

#: Version of the directory layout and file formats, kept in ``STORE``.
FORMAT = 2
_META_KEYS = {"format", "max_key_len"}


@dataclass
class Recovered:
    key_arena: np.ndarray
    key_offsets: np.ndarray
    val_arena: np.ndarray
    val_offsets: np.ndarray
    log: list = field(default_factory=list)


@dataclass
class _Plan:
    """What recovery is to change on disk once the history it keeps checks out."""

    pitr: bool
    aside: list[Path] = field(default_factory=list)  # files point-in-time recovery moves aside
    cut: tuple[Path, int, bytes] | None = None  # a segment to shorten: its good length, its bytes
    torn: list[tuple[Path, int]] = field(default_factory=list)  # torn tails to cut: file, length
    notes: list[str] = field(default_factory=list)


def _empty() -> Recovered:
    return Recovered(np.zeros(0, np.uint8), np.zeros(1, np.int64), np.zeros(0, np.uint8), np.zeros(1, np.int64))


class Durability:
    """The files of one store directory (see the module docstring for the contract)."""

    def __init__(self, directory: str | os.PathLike, sync: str = "always", sync_interval: float = 0.005,
                 max_key_len: int = 4096, recovery: str = "strict") -> None:
        if sync not in SYNC_POLICIES:
            raise ConfigError(f"sync must be one of {SYNC_POLICIES}, not {sync!r}")
        if recovery not in RECOVERY_MODES:
            raise ConfigError(f"recovery must be one of {RECOVERY_MODES}, not {recovery!r}")
        self.dir = Path(directory)
        self.sync = sync
        self.sync_interval = float(sync_interval)
        self.recovery = recovery
        self._fd: int | None = None
        self._segment = 0
        self._path = self._wal(0)  # of the segment being written
        self._base = 0  # segment of the newest checkpoint: the log is the segments from it on
        self._mutex = threading.Lock()
        self._dirty = False
        #: bytes logged since the last checkpoint began (read by the store to take the next)
        self.appended = 0
        self._failed: StoreIOError | None = None
        self._failed_segment = -1
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._lockfd = -1
        _make_dir(self.dir)
        try:
            self._lockfd = os.open(self.dir / "LOCK", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise io_error(exc, "opening", self.dir / "LOCK") from exc
        try:
            fcntl.flock(self._lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._unlock()
            raise StoreLockedError(f"store directory {self.dir} is open in another process") from None
        try:
            self._stored_key_len = self._meta(max_key_len)  # what the files may hold
            self.max_key_len = max_key_len
        except BaseException:
            self._unlock()
            raise

    # -- files -------------------------------------------------------------------------
    def _numbers(self, prefix: str, suffix: str) -> list[int]:
        pat = re.compile(rf"^{prefix}-(\d+){re.escape(suffix)}$")
        return sorted(int(m.group(1)) for p in self.dir.iterdir() if (m := pat.match(p.name)))

    def _wal(self, seg: int) -> Path:
        return self.dir / f"wal-{seg:012d}.log"

    def _ckpt(self, seg: int) -> Path:
        return self.dir / f"checkpoint-{seg:012d}.ckpt"

    def _meta(self, max_key_len: int) -> int:
        """The ``max_key_len`` in the store's ``STORE`` file (written first for a new store):
        the files may hold keys as long as the largest value the store was ever opened with,
        so a smaller one is refused (a larger one is written by :meth:`recover`)."""
        path = self.dir / "STORE"
        try:
            text = path.read_text()
        except FileNotFoundError:
            if self._numbers("wal", ".log") or self._numbers("checkpoint", ".ckpt"):
                raise CorruptLogError(f"{path} is missing, but {self.dir} holds log segments or checkpoints",
                                      path) from None
            self._write_meta(max_key_len)
            return max_key_len
        except (OSError, UnicodeDecodeError) as exc:
            raise CorruptLogError(f"{path} cannot be read: {exc}", path) from None
        try:
            meta = json.loads(text)
            ok = isinstance(meta, dict) and set(meta) == _META_KEYS and type(meta["max_key_len"]) is int \
                and meta["max_key_len"] >= 1
        except ValueError:
            ok = False
        if not ok:
            raise CorruptLogError(f"{path} is damaged: {text[:200]!r}", path)
        if meta["format"] != FORMAT:
            raise CorruptLogError(f"{path}: format {meta['format']!r}, this version reads format {FORMAT}", path)
        stored = meta["max_key_len"]
        if max_key_len < stored:
            raise ConfigError(f"max_key_len {max_key_len} is less than the {stored} the store at {self.dir} "
                              f"was opened with: its files may hold keys that long")
        return stored

    def _write_meta(self, max_key_len: int) -> None:
        fileio.write_file(self.dir / "STORE", json.dumps({"format": FORMAT, "max_key_len": max_key_len}).encode())

    # -- recovery ----------------------------------------------------------------------
    def recover(self) -> Recovered:
        """The newest checkpoint and the log's writes after it (docs/store.md, Opening):
        nothing is changed on disk unless the whole history checks out (strict), or the
        part kept does (point-in-time)."""
        plan = _Plan(self.recovery == "point-in-time")
        rec, base = self._base_checkpoint(plan)
        kept = self._contiguous(base, plan)
        kept = self._replay(kept, rec, plan)
        # Everything checks out (or is to be cut): only now are files changed.
        for tmp in self.dir.glob("*.tmp"):
            fileio.unlink(tmp)  # a checkpoint or STORE interrupted by a crash
        if self.max_key_len > self._stored_key_len:
            self._write_meta(self.max_key_len)
            self._stored_key_len = self.max_key_len
        notes = plan.notes
        if plan.aside or plan.cut:
            where = self._set_aside(plan.aside, plan.cut)
            notes = [f"point-in-time recovery: {'; '.join(notes)}; the cut part of the history is in {where}"]
        for path, size in plan.torn:
            _truncate(path, size)
        for n in notes:
            warnings.warn(n, LogRecoveryWarning, stacklevel=3)
        self._base = base
        self._open_segment(max([base] + kept))
        if self.sync == "batch":
            self._flusher = threading.Thread(target=self._flush_loop, name="learnedidx-wal-flush", daemon=True)
            self._flusher.start()
        return rec

    def _base_checkpoint(self, plan: _Plan) -> tuple[Recovered, int]:
        """The newest checkpoint that reads back right and its segment (strict: the newest
        one must); an empty store at segment 0 when there is none."""
        for seg in reversed(self._numbers("checkpoint", ".ckpt")):
            try:
                return Recovered(*checkpointfile.read(self._ckpt(seg), self._stored_key_len)), seg
            except CorruptLogError as exc:
                if not plan.pitr:
                    raise CorruptLogError(f"{exc}; open with recovery='point-in-time' to go back to the "
                                          f"newest history that checks out", exc.path, exc.offset) from None
                plan.aside.append(self._ckpt(seg))
                plan.notes.append(f"set aside damaged checkpoint {seg:012d} ({exc})")
        return _empty(), 0

    def _contiguous(self, base: int, plan: _Plan) -> list[int]:
        """The log segments from ``base`` on, up to the first one missing."""
        chain = [s for s in self._numbers("wal", ".log") if s >= base]
        for i, s in enumerate(chain):
            if s == base + i:
                continue
            if i == 0 and base == 0:  # no checkpoint, and a log that does not start at 0
                missing = self._ckpt(s)
                why = (f"{missing.name} is missing: the log starts at {self._wal(s).name} and no checkpoint "
                       f"holds what came before")
            else:
                missing = self._wal(base + i)
                why = f"{missing.name} is missing: the history before {self._wal(s).name} is incomplete"
            if not plan.pitr:
                raise CorruptLogError(f"{why}; open with recovery='point-in-time' to keep the history up "
                                      f"to the gap and set the rest aside", missing)
            plan.aside.extend(self._wal(x) for x in chain[i:])
            plan.notes.append(f"{why}: set aside {', '.join(self._wal(x).name for x in chain[i:])}")
            return chain[:i]
        return chain

    def _replay(self, kept: list[int], rec: Recovered, plan: _Plan) -> list[int]:
        """Read the writes of segments ``kept`` into ``rec``, up to the first damaged record:
        a torn tail is to be cut, damage followed by a valid record refused (strict) or cut
        with the rest set aside (point-in-time).  The segments the log goes on with."""
        mk = self._stored_key_len
        for i, s in enumerate(kept):
            path = self._wal(s)
            data = _read(path)
            seg = wal.read_segment(data, mk)
            rec.log.extend(seg.writes)
            if not seg.damaged:
                continue
            later = kept[i + 1:]
            follows = wal.next_record(data, seg.end + 1, mk)
            where = f"at byte {follows} of {path.name}" if follows >= 0 else ""
            for x in later:
                if not where and wal.next_record(_read(self._wal(x)), 0, mk) >= 0:
                    where = f"in {self._wal(x).name}"
            what = f"log segment {path.name} is damaged at byte {seg.end} ({seg.reason})"
            if not where:  # nothing valid after it: an interrupted last write
                plan.torn = [(path, seg.end)] + [(self._wal(x), 0) for x in later]
                plan.notes.append(f"cut torn log tail of {path.name} at byte {seg.end} "
                                  f"({seg.size - seg.end} bytes dropped: {seg.reason})")
            elif not plan.pitr:
                raise CorruptLogError(f"{what}, and valid records follow it ({where}); open with "
                                      f"recovery='point-in-time' to keep the history up to that byte and set "
                                      f"the rest aside", path, seg.end)
            else:
                plan.cut = (path, seg.end, data)
                plan.aside.extend(self._wal(x) for x in later)
                plan.notes.append(f"{what}: kept the history before it; the whole segment and "
                                  f"{len(later)} later segment(s) set aside")
            return kept[:i + 1]
        return kept

    def _set_aside(self, files: list[Path], cut: tuple[Path, int, bytes] | None) -> Path:
        """Move ``files`` into a new ``aside-<time>`` directory, and shorten the ``cut``
        segment to its good part, a full copy of it kept aside: in that order, so that a
        crash in between leaves a history that recovery reads the same way again."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        where = self.dir / f"aside-{stamp}"
        k = 1
        while where.exists():
            where, k = self.dir / f"aside-{stamp}-{k}", k + 1
        try:
            fileio.ops.mkdir(where, 0o700)
        except OSError as exc:
            raise io_error(exc, "creating", where) from exc
        for f in files:
            fileio.rename(f, where / f.name)
        fileio.sync_dir(where)
        fileio.sync_dir(self.dir)
        if cut is not None:
            path, end, data = cut
            try:
                fileio.ops.link(path, where / path.name)
            except OSError as exc:
                raise io_error(exc, "keeping a copy of", path) from exc
            fileio.sync_dir(where)
            fileio.write_file(path, data[:end])
        return where

    # -- logging -----------------------------------------------------------------------
    def _open_segment(self, seg: int) -> int:
        path = self._wal(seg)
        try:
            fd = fileio.ops.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise io_error(exc, "opening", path) from exc
        try:
            fileio.sync_dir(self.dir)
        except BaseException:
            fileio.ops.close(fd)
            raise
        old, self._fd, self._segment, self._path = self._fd, fd, seg, path
        return old if old is not None else -1

    def _fail(self, exc: StoreIOError) -> None:
        """Refuse every write from now on (mutex held): see the module docstring."""
        if self._failed is None:
            self._failed, self._failed_segment = exc, self._segment
            log.error("write-ahead log of %s failed (%s): writes are refused until a checkpoint succeeds "
                      "or the store is reopened", self.dir, exc)

    def _append(self, blob: bytes) -> None:
        with self._mutex:
            if self._fd is None:
                raise StoreClosedError("the store is closed")
            if self._failed is not None:
                raise LogFailedError(errno.EIO, f"the write-ahead log of {self.dir} failed earlier "
                                                f"({self._failed}); writes are refused until a checkpoint "
                                                f"succeeds or the store is reopened")
            try:
                fileio.write_all(self._fd, blob, self._path)
                self.appended += len(blob)
                if self.sync == "always":
                    fileio.sync(self._fd, self._path)
                else:
                    self._dirty = True
            except StoreIOError as exc:
                self._fail(exc)
                raise

    def log_put(self, key: bytes, value: bytes) -> None:
        self._append(wal.encode_put(key, value))

    def log_delete(self, key: bytes) -> None:
        self._append(wal.encode_delete(key))

    def log_batch(self, records: Sequence[tuple[int, bytes, bytes | None]]) -> None:
        self._append(wal.encode_batch(records))

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.sync_interval):
            with self._mutex:
                if self._dirty and self._fd is not None and self._failed is None:
                    try:
                        fileio.sync(self._fd, self._wal(self._segment))
                    except StoreIOError as exc:
                        self._fail(exc)
                    self._dirty = False

    def log_bytes(self) -> int:
        """Bytes of log since the newest checkpoint."""
        total = 0
        for s in self._numbers("wal", ".log"):
            if s >= self._base:
                try:
                    total += self._wal(s).stat().st_size
                except FileNotFoundError:
                    pass  # dropped by a checkpoint meanwhile
        return total

    # -- checkpoints -------------------------------------------------------------------
    def start_checkpoint(self) -> int:
        """Rotate to a new log segment and return its number (call with the store's writer
        lock held: the checkpoint is the image of this moment)."""
        with self._mutex:
            if self._fd is None:
                raise StoreClosedError("the store is closed")
            if self._failed is None:
                # Synced whatever the policy: a later segment holding records means this
                # one is complete, which recovery relies on to tell a torn tail.
                try:
                    fileio.sync(self._fd, self._wal(self._segment))
                except StoreIOError as exc:
                    self._fail(exc)  # the checkpoint covers this segment: go on
            old = self._open_segment(self._segment + 1)
            self._dirty = False
            self.appended = 0
            try:
                fileio.ops.close(old)
            except OSError as exc:  # a close may report a failed write-back (NFS)
                self._fail(io_error(exc, "closing", self._wal(self._segment - 1)))
            return self._segment

    def finish_checkpoint(self, segment: int, chunks: Iterable[checkpointfile.Chunk]) -> None:
        """Write the checkpoint covering every segment < ``segment`` from ``chunks`` (see
        :data:`~learnedidx.index.checkpointfile.Chunk`), then drop those segments."""
        final = self._ckpt(segment)
        tmp = final.with_name(final.name + ".tmp")
        try:
            fd = fileio.ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise io_error(exc, "creating", tmp) from exc
        try:
            try:
                checkpointfile.write(fd, tmp, chunks, self.max_key_len)
                fileio.sync(fd, tmp, data_only=False)
            finally:
                fileio.ops.close(fd)
            fileio.rename(tmp, final)
        except BaseException:
            try:
                fileio.unlink(tmp)
            except StoreIOError:
                pass  # removed at the next open
            raise
        fileio.sync_dir(self.dir)
        with self._mutex:
            self._base = max(self._base, segment)
            if self._failed is not None and self._failed_segment < segment:
                log.warning("write-ahead log of %s is good again: checkpoint %d holds every acknowledged write",
                            self.dir, segment)
                self._failed = None
        covered = [self._wal(s) for s in self._numbers("wal", ".log") if s < segment]
        covered += [self._ckpt(s) for s in self._numbers("checkpoint", ".ckpt") if s < segment]
        for path in covered:
            try:
                fileio.unlink(path)
            except StoreIOError as exc:  # the checkpoint is durable; recovery ignores what it covers
                log.warning("could not delete %s, which checkpoint %d covers: %s", path, segment, exc)

    @contextlib.contextmanager
    def released_on_error(self) -> Iterator[None]:
        """Close (release the directory) if the block raises, then let the error through."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()
            raise

    @property
    def closed(self) -> bool:
        return self._lockfd < 0

    def close(self) -> None:
        """Stop the flusher, sync the log (unless it failed) and release the directory;
        the lock is released even when the sync fails (which then raises)."""
        self._stop.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join()
        err: StoreIOError | None = None
        with self._mutex:
            if self._fd is not None:
                if self.sync != "off" and self._failed is None:
                    try:
                        fileio.sync(self._fd, self._wal(self._segment))
                    except StoreIOError as exc:
                        err = exc
                try:
                    fileio.ops.close(self._fd)
                except OSError:
                    pass
                self._fd = None
        self._unlock()
        if err is not None:
            raise err

    def _unlock(self) -> None:
        if self._lockfd >= 0:
            os.close(self._lockfd)  # closing the only descriptor releases the flock
            self._lockfd = -1


def _make_dir(path: Path) -> None:
    """Create the store directory (mode 0700) and its parents."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise StoreIOError(errno.ENOTDIR, f"store path {path} exists and is not a directory") from None
    except OSError as exc:
        raise io_error(exc, "creating the store directory", path) from exc
    if not path.is_dir():
        raise StoreIOError(errno.ENOTDIR, f"store path {path} exists and is not a directory")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise io_error(exc, "reading", path) from exc


def _truncate(path: Path, size: int) -> None:
    try:
        fd = fileio.ops.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise io_error(exc, "opening", path) from exc
    try:
        try:
            fileio.ops.ftruncate(fd, size)
        except OSError as exc:
            raise io_error(exc, "truncating", path) from exc
        fileio.sync(fd, path)
    finally:
        fileio.ops.close(fd)
