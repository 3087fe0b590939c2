"""The server's files (its socket, pidfile and the daemon's log), kept out of other OS users' reach.

PostgreSQL's rules for its data directory and lock file, applied to every directory the server
puts a file in: it must be a real directory (not a symbolic link) owned by the server's OS user
and writable by nobody else (no group or other write bit); a missing one is created with mode
0700.  With the default socket path under ``/tmp`` another user could otherwise create the
directory first and plant links where the server writes.  Files are opened relative to the
checked directory's descriptor (a later rename of the path cannot redirect them) with
``O_NOFOLLOW``, new ones with ``O_EXCL`` and mode 0600, and an existing one must be a regular
file of this user with a single link.

The pidfile is also the server's lock: the server holds a POSIX write lock on it while it runs,
so whether a server runs, and which process it is, are the kernel's answers (``F_GETLK`` names
the holder), never a pid read from a file that may be stale and reused by another process.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import select
import signal
import socket
import stat
import struct
from pathlib import Path

from learnedidx.errors import NoPidfileError, ServerRunningError, UnsafePathError

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
#: ``struct flock`` of 64-bit Linux: l_type, l_whence, l_start, l_len, l_pid
_FLOCK = struct.Struct("hhqqi4x")
_ELSEWHERE = "or choose a --socket (and --pidfile) in a directory only you can write"


def user_name(uid: int) -> str:
    """``name (uid N)``, or ``uid N`` for a uid without a name."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def open_dir(path: str | os.PathLike, *, create: bool = False) -> int:
    """An ``O_PATH`` descriptor of directory ``path`` once it passes the rules above
    (UnsafePathError otherwise); with ``create`` a missing one is made (mode 0700, with its
    parents), without it FileNotFoundError."""
    path = os.fspath(path) or "."
    while True:
        try:
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY | _NOFOLLOW)
            break
        except FileNotFoundError:
            if not create:
                raise
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked like any other
                os.mkdir(path, 0o700)
            create = False
        except NotADirectoryError:
            what = "a symbolic link" if os.path.islink(path) else "not a directory"
            raise UnsafePathError(f"{path} is {what}: the server's files belong in a real directory; remove it "
                                  f"(the server then creates the directory), {_ELSEWHERE}") from None
        except PermissionError as exc:
            raise UnsafePathError(f"cannot reach directory {path} ({exc.strerror}): {_ELSEWHERE}") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UnsafePathError(
                f"directory {path} belongs to {user_name(st.st_uid)}, not to {user_name(os.geteuid())} who runs "
                f"the server: another user may have made it to reach the server's files. Have it removed (by "
                f"its owner or root; the server then creates it), {_ELSEWHERE}")
        if st.st_mode & 0o022:
            who = " and ".join(w for w, bit in (("its group", 0o020), ("other users", 0o002)) if st.st_mode & bit)
            raise UnsafePathError(f"directory {path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}): "
                                  f"run `chmod go-w {path}`, {_ELSEWHERE}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(dir_fd: int, name: str, flags: int, path: str) -> int:
    """Open file ``name`` of a directory checked by :func:`open_dir` (``path`` names it in
    messages) without following a symbolic link, creating it with mode 0600 when ``flags`` say
    so; an existing file must be a regular file of this user with one link (UnsafePathError)."""
    try:  # O_NONBLOCK: a FIFO planted there must not block the open
        fd = os.open(name, flags | _NOFOLLOW | os.O_NONBLOCK, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{path} is a symbolic link: remove it (the server never writes through "
                                  "one)") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise UnsafePathError(f"{path} is not a regular file: remove it") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{path} is not a regular file: remove it")
        if st.st_uid != os.geteuid():
            raise UnsafePathError(f"{path} belongs to {user_name(st.st_uid)}, not to {user_name(os.geteuid())}: "
                                  "remove it")
        if st.st_nlink != 1:
            raise UnsafePathError(f"{path} has {st.st_nlink} links (a hard link to another file): remove it")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_log(path: str) -> int:
    """The daemon's log ``path``, opened for appending (created when missing)."""
    p = Path(path)
    dir_fd = open_dir(p.parent, create=True)
    try:
        return open_file(dir_fd, p.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, path)
    finally:
        os.close(dir_fd)


def claim_socket(path: str) -> int:
    """Check the socket's directory and what is at ``path`` before binding there: a server
    answering is ServerRunningError, anything but a socket UnsafePathError, a stale socket is
    removed.  Returns the directory's descriptor."""
    p = Path(path)
    dir_fd = open_dir(p.parent, create=True)
    try:
        try:
            st = os.stat(p.name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return dir_fd
        if not stat.S_ISSOCK(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a socket"
            raise UnsafePathError(f"{path} exists and is {what}: remove it, or choose another --socket")
        if answers(path):
            raise ServerRunningError(f"a server is already listening on {path}: stop it first "
                                     f"(learnedidx server stop --socket {path})")
        os.unlink(p.name, dir_fd=dir_fd)
    except BaseException:
        os.close(dir_fd)
        raise
    return dir_fd


def answers(path: str) -> bool:
    """Whether a process listens on Unix socket ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(0.5)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def lock_holder(fd: int) -> int | None:
    """The pid of the process holding a lock on the file of ``fd``, None when none does."""
    query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    kind, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, query))
    return None if kind == fcntl.F_UNLCK else pid


def _running(pid: int | None, path: str) -> ServerRunningError:
    return ServerRunningError(f"a server (pid {pid}) is running with pidfile {path}: stop it first "
                              f"(learnedidx server stop --pidfile {path})")


def _same_file(dir_fd: int, name: str, fd: int) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


class PidFile:
    """The running server's pidfile: its pid, locked for as long as the process runs."""

    def __init__(self, path: str, dir_fd: int, fd: int) -> None:
        self.path, self._dir_fd, self._fd = path, dir_fd, fd

    @classmethod
    def acquire(cls, path: str) -> "PidFile":
        """Create ``path`` (or take over a stale one), lock it and write this process's pid;
        ServerRunningError while another server holds it."""
        name = Path(path).name
        dir_fd = open_dir(Path(path).parent, create=True)
        try:
            while True:
                try:
                    fd = open_file(dir_fd, name, os.O_RDWR | os.O_CREAT | os.O_EXCL, path)
                except FileExistsError:
                    try:
                        fd = open_file(dir_fd, name, os.O_RDWR, path)  # stale unless locked
                    except FileNotFoundError:  # its server removed it meanwhile
                        continue
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    holder = lock_holder(fd)
                    os.close(fd)
                    if exc.errno in (errno.EACCES, errno.EAGAIN):
                        raise _running(holder, path) from None
                    raise
                if _same_file(dir_fd, name, fd):  # not a file its exiting server removed meanwhile
                    break
                os.close(fd)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:
            os.close(dir_fd)
            raise
        return cls(path, dir_fd, fd)

    def release(self) -> None:
        """Remove the pidfile, then give up its lock."""
        name = Path(self.path).name
        if _same_file(self._dir_fd, name, self._fd):
            os.unlink(name, dir_fd=self._dir_fd)
        os.close(self._fd)
        os.close(self._dir_fd)


def holder(path: str) -> int | None:
    """The pid of the server running with pidfile ``path``: None when the file is missing or
    stale (no process holds it), UnsafePathError when it is not safely this user's."""
    p = Path(path)
    try:
        dir_fd = open_dir(p.parent)
    except FileNotFoundError:
        return None
    try:
        fd = open_file(dir_fd, p.name, os.O_RDONLY, path)
    except FileNotFoundError:
        return None
    finally:
        os.close(dir_fd)
    try:
        return lock_holder(fd)
    finally:
        os.close(fd)


def check_start(socket_path: str, pidfile: str) -> None:
    """What a server starting with ``socket_path`` and ``pidfile`` would refuse, refused here
    (``start --daemon`` checks before it forks, where its caller sees the message)."""
    pid = holder(pidfile)
    if pid is not None:
        raise _running(pid, pidfile)
    os.close(claim_socket(socket_path))


def stop(pidfile: str, timeout: float = 10.0) -> int | None:
    """SIGTERM the server holding ``pidfile`` and wait until it has exited: its pid, or None
    when no process holds the file (stale: nothing is signalled).  NoPidfileError without the
    file, UnsafePathError when it or its directory is not safely this user's,
    ServerRunningError when the server has not exited after ``timeout`` seconds."""
    p = Path(pidfile)
    try:
        dir_fd = open_dir(p.parent)
        try:
            fd = open_file(dir_fd, p.name, os.O_RDONLY, pidfile)
        finally:
            os.close(dir_fd)
    except FileNotFoundError:
        raise NoPidfileError(f"no server pidfile at {pidfile} (a server started with --pidfile: stop it with the "
                             "same --pidfile)") from None
    try:
        pid = lock_holder(fd)
        if pid is None:
            return None
        pidfd = os.pidfd_open(pid)
        try:
            # the descriptor names the holder itself, not a process that took its pid after it exited
            if lock_holder(fd) != pid:
                return None
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            if not select.select([pidfd], [], [], timeout)[0]:  # readable once the process has exited
                raise ServerRunningError(f"server pid {pid} has not exited {timeout:g} s after SIGTERM "
                                         f"(kill -KILL {pid} ends it)")
        finally:
            os.close(pidfd)
    finally:
        os.close(fd)
    return pid
