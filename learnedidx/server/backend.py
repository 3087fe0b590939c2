"""The ``server`` training backend: the client side of ``train.*`` on the accelerator server."""
from __future__ import annotations

import hashlib
import os
import itertools
import threading
import time
import uuid
from collections import OrderedDict

import numpy as np

from learnedidx import checks
from learnedidx.errors import ConfigError, LearnedIdxError, ProtocolError, RemoteError, ServerUnavailableError
from learnedidx.index.kernels import FB_COLS, feature_bytes_many
from learnedidx.index.training import KeysJob, TrainResult
from learnedidx.server.client import Client


def _check_options(socket, timeout, token, tcp, cache_r, max_groups) -> None:
    """ConfigError for an option of the wrong type or out of range (a store checks its
    trainer's options when it opens, not at its first retrain)."""
    if socket is not None and not isinstance(socket, (str, os.PathLike)):
        raise ConfigError(f"socket must be a path, not {type(socket).__name__}")
    checks.number("timeout", timeout, 0, 86400, above=True)
    if token is not None and not isinstance(token, str):
        raise ConfigError(f"token must be a str, not {type(token).__name__}")
    if tcp is not None:
        if not (isinstance(tcp, tuple) and len(tcp) == 2 and isinstance(tcp[0], str)):
            raise ConfigError(f"tcp must be a (host, port) tuple, not {tcp!r}")
        checks.integer("tcp port", tcp[1], 0, 65535)
    checks.boolean("cache_r", cache_r)
    checks.integer("max_groups", max_groups, 1, 1 << 24)


class ServerBackend:
    """Sends train jobs to the accelerator server (arrays through shared memory).

    With ``cache_r`` (default) the memoized R stays on the server: every job names a group
    id (this backend's namespace + a counter) and version, and an incremental job whose
    ``R_old`` is an R this server returned sends only the group id and version.  The store
    hands over R factors, not group ids, so R's are recognised by a digest of their bytes.
    A cache miss on the server (evicted, or the server restarted) resends R.

    A dead or silent server raises :class:`~learnedidx.errors.ServerUnavailableError`; the
    store then trains in-process and logs one warning.
    """

    name = "server"

    def __init__(self, socket: str | None = None, timeout: float = 30.0, token: str | None = None,
                 tcp: tuple[str, int] | None = None, cache_r: bool = True, max_groups: int = 1 << 16) -> None:
        _check_options(socket, timeout, token, tcp, cache_r, max_groups)
        self.client = Client(tcp or socket, token=token, timeout=timeout)
        self.cache_r = cache_r
        self.max_groups = max_groups
        self._ns = uuid.uuid4().hex[:16]
        self._ids = itertools.count()
        self._known: OrderedDict[bytes, tuple[str, int]] = OrderedDict()  # digest of R -> (group, version)
        self._lock = threading.Lock()
        self._no_keys = -1  # the connection (Client.generation) on which train.keys was unknown
        # Compiled now, not in a retrain: the trimming of a request's keys.
        feature_bytes_many(np.zeros((0, FB_COLS), np.int64))

    def feature_limit(self) -> int | None:
        """The widest feature length the server's device trains (its ``health`` reply), or
        None when the server cannot be reached now (then a refusal surfaces at training)."""
        try:
            return self.client.call("health")[0].get("max_features")
        except (ServerUnavailableError, ProtocolError):
            return None

    def _remember(self, R: np.ndarray, group: str, version: int) -> None:
        with self._lock:
            self._known[_digest(R)] = (group, version)
            while len(self._known) > self.max_groups:
                self._known.popitem(last=False)

    def _call(self, op: str, args: dict, arrays: dict[str, np.ndarray]) -> TrainResult:
        t0 = time.perf_counter()
        result, out = self.client.call(op, args, arrays)
        if "group" in result:
            self._remember(out["R"], result["group"], int(result["version"]))
        return TrainResult(R=out["R"], coef=out["coef"], seconds=time.perf_counter() - t0,
                           device_cycles=int(result.get("cycles", 0)),
                           info={"device_seconds": result.get("device_seconds", 0.0),
                                 "server_seconds": result.get("host_seconds", 0.0),
                                 "r_cached": bool(result.get("r_cached"))})

    def _new_group(self) -> dict:
        return {"group": f"{self._ns}-{next(self._ids)}", "version": 0} if self.cache_r else {}

    def train_full(self, A, b) -> TrainResult:
        return self._call("train.full", self._new_group(), {"A": A, "b": b})

    def train_incremental(self, R_old, A_delta, A, b) -> TrainResult:
        arrays = {"A_delta": A_delta, "A": A, "b": b}
        if self.cache_r:
            with self._lock:
                known = self._known.pop(_digest(R_old), None)
            if known is not None:
                try:
                    return self._call("train.incremental", {"group": known[0], "version": known[1]}, arrays)
                except RemoteError as exc:
                    if exc.kind != "cache-miss":
                        raise
        return self._call("train.incremental", self._new_group(), {"R_old": R_old, **arrays})

    def train_keys(self, jobs: list[KeysJob]) -> list[TrainResult]:
        """Many groups' retrains in one ``train.keys`` request: the keys travel (the bytes of
        each that its feature row reads, not a row of doubles) and the server builds the rows.  R's sent and
        returned this way are not kept on the server (``cache_r`` covers the one-group calls)."""
        if self._no_keys == self.client.generation:
            return [self._train_rows(j) for j in jobs]
        runs, keep, spec = [], [], []
        for j in jobs:
            for arena, offsets, n in [(j.arena, j.offsets, j.n)] + ([(j.new_arena, j.new_offsets, j.new)] if j.new else []):
                arena, offsets = np.ascontiguousarray(arena, np.uint8), np.ascontiguousarray(offsets[:n + 1], np.int64)
                keep.append((arena, offsets))  # what the table points into, alive until the call returns
                runs.append((arena.ctypes.data, arena.size, offsets.ctypes.data, n, j.prefix, j.feat))
            spec.append({"n": j.n, "new": j.new, "prefix": 0, "feat": j.feat, "incremental": j.R_old is not None})
        # Only the bytes the feature rows read travel (with prefix 0, the same rows).
        keys, offsets, bad = feature_bytes_many(np.array(runs, np.int64).reshape(-1, FB_COLS))
        del keep
        if bad >= 0:
            raise LearnedIdxError("key offsets past the key bytes")
        arrays = {"keys": keys, "offsets": offsets}
        olds = [np.asarray(j.R_old, np.float64).reshape(-1) for j in jobs if j.R_old is not None]
        if olds:
            arrays["R_old"] = np.concatenate(olds)
        t0 = time.perf_counter()
        try:
            result, out = self.client.call("train.keys", {"jobs": spec}, arrays)
        except RemoteError as exc:
            if exc.kind == "too-large" and len(jobs) > 1:  # past the server's limit: halves
                half = len(jobs) // 2
                return self.train_keys(jobs[:half]) + self.train_keys(jobs[half:])
            if exc.kind == "unknown-op":  # a server without train.keys: one group a call
                self._no_keys = self.client.generation  # until the connection changes (maybe a newer server)
                return [self._train_rows(j) for j in jobs]
            raise
        seconds = (time.perf_counter() - t0) / len(jobs)
        cycles = result.get("cycles")
        widths = [j.feat + 1 for j in jobs]
        if (not isinstance(cycles, list) or len(cycles) != len(jobs) or "R" not in out or "coef" not in out
                or out["coef"].shape != (sum(widths),) or out["R"].shape != (sum(w * w for w in widths),)):
            raise ProtocolError("the server's train.keys reply does not match the request")
        res, ra, ca = [], 0, 0
        for w, c in zip(widths, cycles):
            # Copies: a view would keep the whole reply alive for as long as any one of its
            # groups keeps this R as its memo.
            res.append(TrainResult(R=out["R"][ra:ra + w * w].reshape(w, w).copy(), coef=out["coef"][ca:ca + w].copy(),
                                   seconds=seconds, device_cycles=int(c)))
            ra += w * w
            ca += w
        return res

    def _train_rows(self, job: KeysJob) -> TrainResult:
        """One job of :meth:`train_keys` as a one-group call, its feature rows built here."""
        A, b, A_delta = job.rows()
        return self.train_full(A, b) if A_delta is None else self.train_incremental(job.R_old, A_delta, A, b)


def _digest(R: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(R, np.float64).tobytes(), digest_size=16).digest()
