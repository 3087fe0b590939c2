"""A file layer that fails the way disks do, for :data:`learnedidx.index.fileio.ops`.

``FaultyOps`` passes every call to the real one unless a rule matches: short writes,
an errno from ``write``/``fdatasync``/``fsync``/``open``/``replace`` on files whose name
matches a pattern.  It also remembers, per file, how many bytes were synced, so that a test
can cut every file back to what a power loss would have left (:func:`power_loss`).
"""
from __future__ import annotations

import errno as E
import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from learnedidx.index.fileio import FileOps


@dataclass
class Rule:
    call: str  # write, fdatasync, fsync, open, replace, ...
    pattern: str  # fnmatch of the file name
    errno: int | None  # None: a short write
    skip: int = 0  # let this many matching calls through first
    times: int | None = None  # fail this many (None: every one from then on)
    partial: int = 0  # write: bytes written before the error (a torn record)


class FaultyOps(FileOps):
    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self.synced: dict[str, int] = {}  # file name -> bytes known on disk
        self.calls: list[tuple[str, str]] = []
        self.modes: dict[str, int] = {}

    def fail(self, call: str, pattern: str = "wal-*", errno: int | None = E.EIO, **kw) -> Rule:
        rule = Rule(call, pattern, errno, **kw)
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def _name(self, fd_or_path) -> str:
        if not isinstance(fd_or_path, int):
            return Path(fd_or_path).name
        try:  # also descriptors opened before this object was put in place
            return Path(os.readlink(f"/proc/self/fd/{fd_or_path}")).name
        except OSError:
            return ""

    def _rule(self, call: str, name: str) -> Rule | None:
        self.calls.append((call, name))
        for r in self.rules:
            if r.call == call and fnmatch.fnmatch(name, r.pattern):
                if r.skip > 0:
                    r.skip -= 1
                    continue
                if r.times is not None:
                    if r.times == 0:
                        continue
                    r.times -= 1
                return r
        return None

    def open(self, path, flags, mode=0o600):
        if (r := self._rule("open", Path(path).name)) is not None:
            raise OSError(r.errno, os.strerror(r.errno), str(path))
        fd = super().open(path, flags, mode)
        self.modes[Path(path).name] = mode
        return fd

    def write(self, fd, data):
        r = self._rule("write", self._name(fd))
        if r is None:
            return super().write(fd, data)
        if r.errno is None:  # a short write: at most 7 bytes (the disk took what it could)
            return super().write(fd, data[:7])
        if r.partial:
            super().write(fd, data[:r.partial])
        raise OSError(r.errno, os.strerror(r.errno))

    def _sync(self, call, fd, real):
        name = self._name(fd)
        if (r := self._rule(call, name)) is not None:
            raise OSError(r.errno, os.strerror(r.errno))
        real(fd)
        if name:
            self.synced[name] = os.fstat(fd).st_size

    def fdatasync(self, fd):
        self._sync("fdatasync", fd, super().fdatasync)

    def fsync(self, fd):
        self._sync("fsync", fd, super().fsync)

    def replace(self, src, dst):
        if (r := self._rule("replace", Path(dst).name)) is not None:
            raise OSError(r.errno, os.strerror(r.errno))
        super().replace(src, dst)
        if Path(src).name in self.synced:
            self.synced[Path(dst).name] = self.synced.pop(Path(src).name)


def power_loss(directory: Path, ops: FaultyOps) -> None:
    """Cut every log segment back to the bytes synced before (what a power loss leaves of
    data written but not synced, in the worst case)."""
    for p in directory.glob("wal-*.log"):
        os.truncate(p, ops.synced.get(p.name, 0))
