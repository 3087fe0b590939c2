"""The server's socket, pidfile and log stay out of other users' reach (docs/accelerator.md,
Files and directories): ``learnedidx server start`` and ``stop`` run as real processes against
directories of the wrong owner or mode, links and files planted where the server's files go,
stale and live pidfiles; a second OS user, when scripts/test.sh prepared one, owns the hostile
directories and serves a socket the clients must refuse."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from learnedidx.errors import ServerUnavailableError
from learnedidx.server.client import Client
from learnedidx.server.process import spawn
from tests.other_user import other_user, other_user_dir, wait_received

CLI = [sys.executable, "-P", "-m", "learnedidx.cli", "server"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def assert_refused(out: subprocess.CompletedProcess, *phrases: str) -> None:
    assert out.returncode == 1 and out.stderr.startswith("error: "), out
    for phrase in phrases:
        assert phrase in out.stderr, (phrase, out.stderr)


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700)
    return path


def victim(tmp_path: Path) -> Path:
    """A file of this user that a planted link points at: it must stay as it is."""
    v = tmp_path / "victim"
    v.write_text("victim\n")
    return v


def sleeper() -> subprocess.Popen:
    """A `sleep` of this user with SIGTERM blocked (the mask survives exec), so that a SIGTERM
    sent to it stays pending where /proc shows it: :func:`got_sigterm` needs no waiting."""
    proc = subprocess.Popen([sys.executable, "-c", "import os, signal, sys; "
                             "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); sys.stdout.write('x'); "
                             "sys.stdout.flush(); os.execvp('sleep', ['sleep', '600'])"], stdout=subprocess.PIPE)
    assert proc.stdout.read(1) == b"x"  # SIGTERM is blocked from here on
    return proc


def got_sigterm(proc: subprocess.Popen) -> bool:
    assert proc.poll() is None
    status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
    pending = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(p >> (signal.SIGTERM - 1) & 1 for p in pending)


@pytest.mark.parametrize("mode,daemon", [(0o777, False), (0o770, True), (0o702, False)])
def test_start_refuses_a_directory_its_group_or_others_can_write(tmp_path, mode, daemon):
    """Others who can write the directory could plant links or replace the socket: refused
    before anything is written, links planted at the pidfile and log untouched."""
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(mode)
    v = victim(tmp_path)
    for suffix in (".pid", ".log"):
        os.symlink(v, run / f"accel.sock{suffix}")
    out = cli("start", "--socket", str(run / "accel.sock"), *(["--daemon"] if daemon else []))
    assert_refused(out, f"directory {run} is writable by", f"chmod go-w {run}")
    assert v.read_text() == "victim\n" and sorted(os.listdir(run)) == ["accel.sock.log", "accel.sock.pid"]


def test_a_symlink_in_place_of_the_directory_is_refused(tmp_path):
    """Even to a directory of this user: its link could be pointed elsewhere at any time."""
    real = private_dir(tmp_path / "real")
    link = tmp_path / "run"
    link.symlink_to(real)
    assert_refused(cli("start", "--socket", str(link / "accel.sock")), f"{link} is a symbolic link")
    assert_refused(cli("stop", "--socket", str(link / "accel.sock")), f"{link} is a symbolic link")
    assert os.listdir(real) == []


def _plant(path: Path, how: str, v: Path) -> None:
    if how == "symlink":
        path.symlink_to(v)
    elif how == "hard link":
        os.link(v, path)
    elif how == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path.write_text("victim\n")


@pytest.mark.parametrize("suffix,how,message", [
    (".pid", "symlink", "accel.sock.pid is a symbolic link"),
    (".pid", "hard link", "accel.sock.pid has 2 links"),
    (".log", "symlink", "accel.sock.log is a symbolic link"),
    (".log", "fifo", "accel.sock.log is not a regular file"),
    ("", "symlink", "accel.sock exists and is a symbolic link"),
    ("", "file", "accel.sock exists and is not a socket"),
])
def test_start_refuses_links_and_files_planted_where_its_files_go(tmp_path, suffix, how, message):
    """In a directory of this user's own: nothing is written through a link or into another
    file, and a file at the socket's path is not deleted (only a stale socket is replaced)."""
    run = private_dir(tmp_path / "run")
    v = victim(tmp_path)
    planted = run / f"accel.sock{suffix}"
    _plant(planted, how, v)
    daemon = ["--daemon"] if suffix == ".log" else []  # the log is the daemon's
    assert_refused(cli("start", "--socket", str(run / "accel.sock"), *daemon), message, "remove it")
    assert v.read_text() == "victim\n" and os.listdir(run) == [planted.name]
    assert planted.is_fifo() if how == "fifo" else planted.read_text() == "victim\n"


def test_a_stale_pidfile_whose_pid_another_process_took(tmp_path):
    """The pidfile is the running server's lock: `stop` signals only the process holding it,
    never the `sleep` that took the pid of a server long gone, and `start` takes the stale
    pidfile over."""
    sock = str(private_dir(tmp_path / "run") / "accel.sock")
    sleep = sleeper()
    try:
        Path(sock + ".pid").write_text(f"{sleep.pid}\n")
        out = cli("stop", "--socket", sock)
        assert out.returncode == 0 and "server was not running" in out.stdout and "nothing was signalled" in out.stdout
        assert not got_sigterm(sleep)
        server = spawn(sock, backend="cpu")
        try:
            assert Path(sock + ".pid").read_text() == f"{server.pid}\n"
            out = cli("stop", "--socket", sock)
            assert out.returncode == 0 and out.stdout == f"stopped server pid {server.pid}\n"
            assert server.proc.poll() == 0  # `stop` returns once the server has exited
        finally:
            server.kill()
        assert not os.path.exists(sock) and not os.path.exists(sock + ".pid")
        assert not got_sigterm(sleep)
    finally:
        sleep.kill()
        sleep.wait()


def test_a_running_servers_pidfile_and_socket_are_not_taken_over(server, tmp_path):
    """A second server refuses a pidfile or socket a running server holds (foreground and
    daemon); the first one serves on, its pid still in its pidfile."""
    pidfile = server.socket_path + ".pid"
    other = tmp_path / "other"
    assert_refused(cli("start", "--socket", str(other / "accel.sock"), "--pidfile", pidfile),
                   f"a server (pid {server.pid}) is running with pidfile {pidfile}", "stop it first")
    assert_refused(cli("start", "--socket", server.socket_path, "--daemon"), f"a server (pid {server.pid})")
    assert_refused(cli("start", "--socket", server.socket_path, "--pidfile", str(tmp_path / "own.pid")),
                   f"a server is already listening on {server.socket_path}")
    assert Path(pidfile).read_text() == f"{server.pid}\n" and not other.exists()
    with Client(server.socket_path, timeout=10) as c:
        assert c.call("health")[0]["pid"] == server.pid


def test_stop_finds_a_server_started_with_pidfile_elsewhere(tmp_path):
    sock = str(tmp_path / "run" / "accel.sock")
    pidfile = str(tmp_path / "pids" / "learnedidx.pid")
    server = spawn(sock, backend="cpu", extra_args=["--pidfile", pidfile])
    try:
        assert_refused(cli("stop", "--socket", sock), f"no server pidfile at {sock}.pid", "--pidfile")
        with Client(sock, timeout=10) as c:
            assert c.call("health")[0]["pid"] == server.pid
        out = cli("stop", "--pidfile", pidfile)  # no --socket needed
        assert out.returncode == 0 and out.stdout == f"stopped server pid {server.pid}\n", out
        assert server.proc.poll() == 0
        assert not os.path.exists(sock) and not os.path.exists(pidfile)
    finally:
        server.kill()


# ------------------------------------------------------------------ another OS user


@pytest.mark.parametrize("daemon", [False, True])
def test_start_refuses_a_directory_another_user_made(tmp_path, daemon):
    """Whatever its mode, and with links planted at the pidfile and log (the default path's
    directory under /tmp, made first by another user)."""
    d = other_user_dir()
    v = victim(tmp_path)
    name = uuid.uuid4().hex
    planted = [d / "open" / f"{name}.sock{suffix}" for suffix in (".pid", ".log")]
    for p in planted:
        p.symlink_to(v)
    try:
        for sub in ("open", "private", "shared"):
            out = cli("start", "--socket", str(d / sub / f"{name}.sock"), *(["--daemon"] if daemon else []))
            assert_refused(out, f"directory {d / sub} belongs to {other_user(d)}", "Have it removed")
        assert v.read_text() == "victim\n"
        assert sorted(p.name for p in (d / "open").iterdir() if p.name.startswith(name)) == sorted(p.name for p in planted)
    finally:
        for p in planted:
            p.unlink()


def test_stop_refuses_a_pidfile_in_a_directory_another_user_controls(tmp_path):
    """A pidfile forged there names a process of this user: it is not signalled."""
    d = other_user_dir()
    sleep = sleeper()
    name = uuid.uuid4().hex
    forged = d / "open" / f"{name}.sock.pid"
    forged.write_text(f"{sleep.pid}\n")
    try:
        assert_refused(cli("stop", "--socket", str(d / "open" / f"{name}.sock")), f"belongs to {other_user(d)}")
        assert_refused(cli("stop", "--pidfile", str(forged)), f"belongs to {other_user(d)}")
        assert not got_sigterm(sleep)
    finally:
        forged.unlink()
        sleep.kill()
        sleep.wait()


def test_a_client_refuses_a_socket_another_user_serves():
    """The other user's process greets like a server: the client reads nothing from it and
    sends it nothing (its listener logs 0 bytes for the connection)."""
    d = other_user_dir()
    sock = str(d / "shared" / "accel.sock")
    before = len(wait_received(d, 0))
    with pytest.raises(ServerUnavailableError, match=re.escape(f"runs as {other_user(d)}, not as")):
        Client(sock, timeout=10).call("health")
    out = cli("status", "--socket", sock)
    assert out.returncode == 1 and f"runs as {other_user(d)}" in out.stderr
    assert wait_received(d, before + 2)[before:] == [0, 0]
