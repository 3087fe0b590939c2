"""A client of the accelerator server."""
from __future__ import annotations

import itertools
import os
import socket
import struct
import threading

import numpy as np

from learnedidx.errors import ProtocolError, RemoteError, ServerUnavailableError
from learnedidx.server import protocol as P
from learnedidx.server.runfiles import user_name


def _check_peer(sock: socket.socket) -> None:
    """Refuse a Unix socket served by another OS user before reading or sending anything: a
    user who could create the socket's path would otherwise receive the requests' data."""
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.geteuid():
        raise ServerUnavailableError(f"the process listening there (pid {pid}) runs as {user_name(uid)}, not as "
                                     f"{user_name(os.geteuid())}: the server must run as its clients' OS user")


class Client:
    """One connection to the server (thread-safe: calls are serialized).

    ``address``: a Unix socket path, or ``(host, port)`` for loopback TCP with ``token``.
    """

    def __init__(self, address: str | tuple[str, int] | None = None, *, token: str | None = None,
                 timeout: float = 60.0) -> None:
        self.address = address or P.default_socket_path()
        self.token = token
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self.generation = 0  #: changes whenever the connection is made or dropped (a new one may reach another server)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _connect(self) -> socket.socket:
        if self._sock is None:
            s = None
            try:
                if isinstance(self.address, tuple):
                    s = socket.create_connection(self.address, timeout=self.timeout)
                else:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.settimeout(self.timeout)
                    s.connect(self.address)
                    _check_peer(s)
                P.read_hello(s)
            except (OSError, ConnectionError, ProtocolError) as exc:
                if s is not None:
                    s.close()
                raise ServerUnavailableError(f"cannot reach the accelerator server at {self.address}: {exc}") from None
            self._sock = s
            self.generation += 1
        return self._sock

    def call(self, op: str, args: dict | None = None, arrays: dict[str, np.ndarray] | None = None,
             timeout: float | None = None) -> tuple[dict, dict[str, np.ndarray]]:
        """Send one request; returns (result, arrays). Raises ServerUnavailableError,
        RemoteError (an error reply) or ProtocolError."""
        refs, paths = P.export_arrays(arrays or {})
        try:
            with self._lock:
                sock = self._connect()
                sock.settimeout(timeout or self.timeout)
                req = {"op": op, "id": next(self._ids), "args": args or {}, "arrays": refs}
                if self.token is not None:
                    req["token"] = self.token
                try:
                    P.write_frame(sock, req)
                    reply = P.read_frame(sock)
                except (OSError, ConnectionError) as exc:
                    self.close()
                    raise ServerUnavailableError(f"accelerator server at {self.address} failed mid-request: {exc}") from None
        finally:
            P.unlink(paths)
        out_refs = reply.get("arrays") or {}
        try:
            out_arrays = P.import_arrays(out_refs)
        finally:
            P.unlink([P.SHM_DIR / n for n in P.shm_names(out_refs)])
        if not reply.get("ok"):
            err = reply.get("error") or {}
            raise RemoteError(err.get("kind", "internal"), err.get("message", "unknown error"))
        if reply.get("id") != req["id"]:
            raise ProtocolError("reply id does not match the request")
        return reply.get("result") or {}, out_arrays

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self.generation += 1

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
