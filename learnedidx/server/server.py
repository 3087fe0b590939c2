"""The accelerator server: a long-running process on a Unix socket (and optionally loopback TCP).

A thread serves each connection, which the server greets with a hello frame; handlers
(``learnedidx.server.registry``) release the GIL in their Numba kernels, and device jobs queue
on the emulated device's units.  Nothing a client sends can stop the server: malformed frames
get a ``protocol`` error reply, failing handlers an ``internal`` one, and what a call may use
is bounded by :class:`Limits`.  Stopping closes every call's connection and exits the
process without waiting for computations (``os._exit``), so a stop always ends it.
"""
from __future__ import annotations

import contextlib
import hmac
import importlib
import ipaddress
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from learnedidx import checks
from learnedidx.errors import (SQLSTATES, AuthError, BadRequestError, CancelledError, ConfigError, LearnedIdxError,
                               ProtocolError, TooLargeError, UnknownOperationError, kind_of)
from learnedidx.server import protocol as P
from learnedidx.server import registry, runfiles
from learnedidx.server.device import Device
from learnedidx.server.stream import CallStream

log = logging.getLogger("learnedidx.server")


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class Limits:
    """What one in-database call may use; set by the server's administrator, never by a caller."""

    max_threads: int = field(default_factory=_cores)  #: engine threads per call
    max_features: int = 1024  #: features per model (and LMF rank)
    max_call_bytes: int = field(default_factory=lambda: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
    max_calls: int = field(default_factory=lambda: max(2, _cores()))  #: calls computing at once; others wait

    def __post_init__(self) -> None:
        for name in ("max_threads", "max_features", "max_call_bytes", "max_calls"):
            checks.integer(name, getattr(self, name), 1)


@dataclass
class ServerConfig:
    socket_path: str = field(default_factory=P.default_socket_path)
    tcp: tuple[str, int] | None = None
    token: str | None = None
    backend: str = "cpu"  #: device for train.* jobs: cpu or fpga-emu
    device_config: str | None = None  #: file with the emulated device's parameters
    device_settings: dict = field(default_factory=dict)  #: DeviceConfig fields overriding the file
    max_message_bytes: int = P.DEFAULT_MAX_MESSAGE
    max_array_bytes: int = P.DEFAULT_MAX_ARRAY_BYTES  #: per request, summed over its arrays
    r_cache_groups: int = 4096  #: memoized R factors kept for train.incremental (LRU, latest version per group)
    socket_mode: int = 0o600
    limits: Limits = field(default_factory=Limits)  #: per-call limits of indb.* requests


class Server:
    def __init__(self, config: ServerConfig) -> None:
        if config.tcp is not None:
            host = config.tcp[0]
            if not ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
                raise ConfigError(f"TCP listening is allowed on loopback only, not {host}")
            if not config.token:
                raise ConfigError("TCP listening needs a shared token")
        self.config = config
        self.started = time.time()
        self.stats = {"requests": 0, "errors": 0, "ops": {}, "connections": 0}
        self._stats_lock = threading.Lock()
        self._stop = threading.Event()
        self._listeners: list[socket.socket] = []
        self._socket_dir: int | None = None  # descriptor of the socket's checked directory (runfiles)
        self._socket_file: tuple[int, int] | None = None  # (device, inode) of the socket bound there
        self._streams: set[CallStream] = set()  # calls in progress, closed when the server stops
        self._calls = threading.BoundedSemaphore(config.limits.max_calls)
        self.warm = threading.Event()  #: the start hooks have run: no call pays for compiling
        self.failed_modules: dict[str, str] = {}
        for mod in registry.HANDLER_MODULES:
            try:
                importlib.import_module(mod)
            except Exception as exc:  # an optional half of the project may be missing
                self.failed_modules[mod] = repr(exc)
                log.warning("handlers of %s not loaded: %s", mod, exc)
        self.device = Device.create(config.backend, config.device_config, r_cache_groups=config.r_cache_groups,
                                    **config.device_settings)

    # ------------------------------------------------------------------ lifecycle
    def bind(self) -> None:
        """Listen on the socket (its directory checked by ``runfiles.claim_socket``), and on TCP."""
        name = Path(self.config.socket_path).name
        self._socket_dir = runfiles.claim_socket(self.config.socket_path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            s.bind(self.config.socket_path)
        finally:
            os.umask(old)
        os.chmod(name, self.config.socket_mode, dir_fd=self._socket_dir)
        st = os.stat(name, dir_fd=self._socket_dir, follow_symlinks=False)
        self._socket_file = (st.st_dev, st.st_ino)
        s.listen(64)
        self._listeners.append(s)
        if self.config.tcp is not None:
            t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            t.bind(self.config.tcp)
            t.listen(64)
            self._listeners.append(t)

    def serve_forever(self) -> None:
        threads = [threading.Thread(target=self._accept_loop, args=(s,), daemon=True) for s in self._listeners]
        threads.append(threading.Thread(target=self._start_hooks, daemon=True))
        for t in threads:
            t.start()
        try:
            while not self._stop.wait(0.2):
                pass
        finally:
            self.close()

    def _start_hooks(self) -> None:
        """Run the start hooks (compiling kernels), then report the server warm in ``health``."""
        for hook in registry.start_hooks():
            try:
                hook(self)
            except Exception:  # a call then compiles what the hook did not: slower, still right
                log.exception("start hook %s failed", getattr(hook, "__name__", hook))
        self.warm.set()

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        with self._stats_lock:
            streams = list(self._streams)
        for st in streams:  # their callers see the connection close; their computations stop
            st.closed.set()
            with contextlib.suppress(OSError):
                st.sock.shutdown(socket.SHUT_RDWR)
        for s in self._listeners:
            try:
                s.close()
            except OSError:
                pass
        self._listeners.clear()
        if self._socket_dir is not None:  # remove our socket, not one a later server bound there
            name = Path(self.config.socket_path).name
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=self._socket_dir, follow_symlinks=False)
                if (st.st_dev, st.st_ino) == self._socket_file:
                    os.unlink(name, dir_fd=self._socket_dir)
            os.close(self._socket_dir)
            self._socket_dir = None

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    # ------------------------------------------------------------------ connections
    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with self._stats_lock:
                self.stats["connections"] += 1
            tcp = listener.family != socket.AF_UNIX
            threading.Thread(target=self._serve_conn, args=(conn, tcp), daemon=True).start()

    @contextlib.contextmanager
    def call_slot(self, stream: CallStream):
        """One of the ``max_calls`` slots for computing, waited for while the caller is there."""
        if not self._calls.acquire(blocking=False):
            with stream.watch() as closed:
                while not self._calls.acquire(timeout=0.1):
                    if closed.is_set() or self._stop.is_set():
                        raise CancelledError("the caller left while waiting for the server")
        try:
            yield
        finally:
            self._calls.release()

    def _serve_conn(self, conn: socket.socket, tcp: bool) -> None:
        with conn:
            if not self._reply(conn, P.HELLO):
                return
            while not self._stop.is_set():
                try:
                    req = P.read_frame(conn, self.config.max_message_bytes)
                except ConnectionError:
                    return
                except ProtocolError as exc:
                    self._count(None, error=True)
                    self._reply(conn, _error_reply(None, exc.kind, str(exc)))
                    return  # framing is lost: close the connection
                except OSError:
                    return
                stream = CallStream(conn, self.config.max_message_bytes)
                with self._stats_lock:
                    self._streams.add(stream)
                try:
                    reply, paths = self._dispatch(req, tcp, stream)
                except Exception as exc:  # e.g. /dev/shm full while exporting the reply
                    log.exception("request failed outside its handler")
                    self._count(None, error=True)
                    reply, paths = _error_reply(req.get("id"), "internal", f"{type(exc).__name__}: {exc}"), []
                finally:
                    with self._stats_lock:
                        self._streams.discard(stream)
                    stream.close()
                if stream.closed.is_set():  # the caller is gone: nobody to answer
                    P.unlink(paths)
                    return
                ok = self._reply(conn, reply)
                if not ok:
                    P.unlink(paths)
                    return
                if stream.in_pass:  # an error in mid-pass: let the caller read it, then part
                    stream.drain()
                    return

    def _reply(self, conn: socket.socket, reply: dict) -> bool:
        frame = P.encode(reply)
        if len(frame) - P.HEADER.size > self.config.max_message_bytes:  # the client would refuse it
            frame = P.encode(_error_reply(reply.get("id"), TooLargeError.kind,
                                          f"the reply of {len(frame):,} bytes exceeds the protocol's limit of "
                                          f"{self.config.max_message_bytes:,} (fewer groups or features)"))
        try:
            conn.sendall(frame)
            return True
        except OSError:
            return False

    def _count(self, op: str | None, error: bool = False) -> None:
        with self._stats_lock:
            self.stats["requests"] += 1
            if error:
                self.stats["errors"] += 1
            if op:
                self.stats["ops"][op] = self.stats["ops"].get(op, 0) + 1

    def _dispatch(self, req: dict, tcp: bool, stream: CallStream | None = None) -> tuple[dict, list]:
        rid = req.get("id")
        op = req.get("op")
        try:
            if tcp and not (isinstance(req.get("token"), str)
                            and hmac.compare_digest(req["token"], self.config.token or "")):
                raise AuthError("missing or wrong token")
            if not isinstance(op, str):
                raise BadRequestError("request has no 'op'")
            fn = registry.lookup(op)
            if fn is None:
                why = "".join(f"; handlers of {m} failed to load: {e}" for m, e in self.failed_modules.items()
                              if op.split(".")[0] in m)
                raise UnknownOperationError(f"unknown operation {op!r}{why}")
            args = req.get("args") or {}
            if not isinstance(args, dict):
                raise BadRequestError("'args' must be an object")
            try:
                arrays = P.import_arrays(req.get("arrays") or {}, self.config.max_array_bytes)
            except TooLargeError:
                raise
            except ProtocolError as exc:  # the frame was fine, its array refs are not
                raise BadRequestError(str(exc)) from None
            ctx = registry.HandlerContext(server=self, peer="tcp" if tcp else "unix", stream=stream)
            try:
                result, out_arrays = fn(args, arrays, ctx)
            except (ValueError, KeyError, TypeError) as exc:
                if isinstance(exc, LearnedIdxError):
                    raise
                # Handlers index and convert the request's JSON directly: a missing or
                # ill-typed argument surfaces as one of these.
                raise BadRequestError(f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            kind = kind_of(exc)
            if kind == "internal":
                log.exception("handler %s failed", op)
            self._count(op if isinstance(op, str) else None, error=True)
            msg = str(exc) if isinstance(exc, LearnedIdxError) else f"{type(exc).__name__}: {exc}"
            return _error_reply(rid, kind, msg), []
        refs, paths = P.export_arrays(out_arrays or {})
        self._count(op)
        return {"id": rid, "ok": True, "result": result, "arrays": refs}, paths


def _error_reply(rid, kind: str, message: str) -> dict:
    """An error reply: its kind and the SQLSTATE the extension raises for it (learnedidx.errors)."""
    return {"id": rid, "ok": False,
            "error": {"kind": kind, "sqlstate": SQLSTATES.get(kind, SQLSTATES["internal"]), "message": message}}


def serve(config: ServerConfig, pidfile: str | None = None) -> None:
    """Run a server in the foreground until SIGTERM or SIGINT, logging to stderr; its pid is
    in ``pidfile`` (when given, locked: ``runfiles.PidFile``) while it runs.  Refusing its
    socket or pidfile raises UnsafePathError or ServerRunningError before it serves."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s learnedidx-server %(levelname)s %(message)s")
    lock = runfiles.PidFile.acquire(pidfile) if pidfile else None
    try:
        server = Server(config)
        server.bind()
    except BaseException:
        if lock:
            lock.release()
        raise
    server.install_signal_handlers()
    log.info("listening on %s (backend %s)", config.socket_path, config.backend)
    try:
        server.serve_forever()
    finally:
        if lock:
            lock.release()
        log.info("stopped")
        logging.shutdown()
        # Calls may still compute (Numba, OpenBLAS threads): exit without waiting for them, nor
        # for interpreter finalization, which could wait on their locks forever.
        os._exit(0)
