"""Start the server in a subprocess (tests, benchmarks, ``learnedidx server start --daemon``)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from learnedidx.errors import ServerUnavailableError


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    socket_path: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_ready(socket_path: str, timeout: float = 60.0, proc: subprocess.Popen | None = None,
               warm: bool = False) -> dict:
    """Poll ``health`` until the server answers (and, with ``warm``, has compiled its kernels)."""
    from learnedidx.server.client import Client

    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServerUnavailableError(f"server exited with status {proc.returncode} before it was ready")
        try:
            with Client(socket_path, timeout=5) as c:
                health = c.call("health")[0]
            if not warm or health.get("warm", True):
                return health
            last = "still compiling its kernels"
        except ServerUnavailableError as exc:
            last = exc
        time.sleep(0.05)
    raise ServerUnavailableError(f"server on {socket_path} not ready after {timeout}s: {last}")


def spawn(socket_path: str, backend: str = "cpu", *, extra_args: list[str] | None = None,
          env: dict | None = None, timeout: float = 60.0, warm: bool = False) -> ServerProcess:
    """Run ``python -m learnedidx.server.main`` in the foreground of a child process and wait
    until ready, with ``warm`` until its kernels are compiled too (``-P``: the current directory
    cannot shadow the installed package)."""
    cmd = [sys.executable, "-P", "-m", "learnedidx.server.main", "--socket", socket_path, "--backend", backend]
    proc = subprocess.Popen(cmd + (extra_args or []), env={**os.environ, **(env or {})},
                            stdin=subprocess.DEVNULL)
    try:
        wait_ready(socket_path, timeout, proc, warm)
    except Exception:
        proc.kill()
        raise
    return ServerProcess(proc, socket_path)
