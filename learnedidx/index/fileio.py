"""The file calls of a durable store, behind one replaceable object.

Every write, sync, rename and unlink of :mod:`learnedidx.index.durability` goes through
:data:`ops`, so that a test can put in its place an object that fails the way a disk does
(a short write, ``ENOSPC``, ``EIO`` from ``fdatasync``) without root or a full disk.
Failures come out as :class:`~learnedidx.errors.StoreIOError` carrying the system's errno.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from learnedidx.errors import StoreIOError


class FileOps:
    """The system calls, as the store makes them (``os`` functions of the same names)."""

    def open(self, path: Path, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags, mode)

    def write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def link(self, src: Path, dst: Path) -> None:
        os.link(src, dst)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def mkdir(self, path: Path, mode: int = 0o700) -> None:
        os.mkdir(path, mode)


#: The calls every store makes; tests replace it (``monkeypatch.setattr(fileio, "ops", ...)``).
ops = FileOps()


def io_error(exc: OSError, what: str, path: object) -> StoreIOError:
    """``exc`` as the store's typed error, saying what was being done to which file."""
    return StoreIOError(exc.errno or errno.EIO, f"{what} {path}: {exc.strerror or exc}")


def write_all(fd: int, data: bytes | bytearray | memoryview, path: object) -> None:
    """Write every byte of ``data`` at the file's position: a short write (a full disk,
    a write over 2 GiB, which Linux cuts at 0x7ffff000 bytes) goes on where it stopped; an
    error, or a write that makes no progress, raises :class:`StoreIOError` (some bytes may
    have reached the file)."""
    try:
        n = ops.write(fd, data)
        if type(data) is bytes and n == len(data):  # the usual case, kept short: every log write
            return
        view = memoryview(data).cast("B")
        done = n
        while done < len(view):
            if n <= 0:
                raise StoreIOError(errno.ENOSPC, f"writing {path}: the write made no progress")
            n = ops.write(fd, view[done:])
            done += n
    except StoreIOError:
        raise
    except OSError as exc:
        raise io_error(exc, "writing", path) from exc


def sync(fd: int, path: object, data_only: bool = True) -> None:
    """``fdatasync`` (or ``fsync``) ``fd``; :class:`StoreIOError` on failure."""
    try:
        (ops.fdatasync if data_only else ops.fsync)(fd)
    except OSError as exc:
        raise io_error(exc, "syncing", path) from exc


def sync_dir(directory: Path) -> None:
    """``fsync`` a directory, making the creations, renames and unlinks in it durable."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise io_error(exc, "opening", directory) from exc
    try:
        sync(fd, directory, data_only=False)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    """Create ``path`` (mode 0600) holding ``data``, durably: written to ``<path>.tmp``,
    fsynced, renamed into place, and the directory fsynced."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise io_error(exc, "creating", tmp) from exc
    try:
        write_all(fd, data, tmp)
        sync(fd, tmp, data_only=False)
    finally:
        ops.close(fd)
    rename(tmp, path)
    sync_dir(path.parent)


def rename(src: Path, dst: Path) -> None:
    try:
        ops.replace(src, dst)
    except OSError as exc:
        raise io_error(exc, f"renaming {src} to", dst) from exc


def unlink(path: Path) -> None:
    try:
        ops.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise io_error(exc, "deleting", path) from exc
