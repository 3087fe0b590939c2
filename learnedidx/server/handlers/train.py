"""Accelerator-server handlers for training requests: ``train.full``, ``train.incremental``,
and ``train.keys`` (many groups at once, each given by its keys).

A request may name the group its R factor belongs to (``args.group``, ``args.version``):
the device then keeps the resulting R (:class:`~learnedidx.server.device.RCache`), and a
later ``train.incremental`` of that group may omit ``R_old`` — the memoized R stays on the
device instead of travelling with every request.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from learnedidx import checks
from learnedidx.errors import BadRequestError, CacheMiss, TooLargeError
from learnedidx.index.kernels import build_features
from learnedidx.index.training import KeysJob
from learnedidx.server.registry import HandlerContext, handler, on_start

#: Most groups one ``train.keys`` request may carry.
MAX_KEY_JOBS = 4096


def _f64(arrays: dict, name: str) -> np.ndarray:
    if name not in arrays:
        raise KeyError(f"missing array {name!r}")
    return np.ascontiguousarray(arrays[name], dtype=np.float64)


def _group(args: dict) -> tuple[str, int] | None:
    g, v = args.get("group"), args.get("version", 0)
    if g is None:
        return None
    if not isinstance(g, str) or not 0 < len(g) <= 256 or type(v) is not int or v < 0:
        raise ValueError("'group' must be a string of 1..256 characters and 'version' an integer >= 0")
    return g, v


def _reply(ctx: HandlerContext, res: dict, key: tuple[str, int] | None, r_cached: bool = False):
    out = {"cycles": int(res["cycles"]), "device_seconds": res["device_seconds"],
           "host_seconds": res["host_seconds"], "r_cached": r_cached}
    if key is not None:
        ctx.server.device.r_cache.put(key[0], key[1], res["R"])
        out.update(group=key[0], version=key[1])
    return out, {"R": res["R"], "coef": res["coef"]}


@handler("train.full")
def train_full(args, arrays, ctx):
    """Least squares of A (N×n) against b on the server's device; R kept under args.group/version."""
    key = _group(args)
    return _reply(ctx, ctx.server.device.run("full", _f64(arrays, "A"), _f64(arrays, "b")), key)


@handler("train.incremental")
def train_incremental(args, arrays, ctx):
    """SIA memoized retrain: R_old (or the server's R of args.group at args.version), A_delta, A, b.
    The new R is kept as version + 1 of the group."""
    key = _group(args)
    if "R_old" in arrays:
        R_old, cached = _f64(arrays, "R_old"), False
    elif key is None:
        raise KeyError("missing array 'R_old' (or args 'group' and 'version' of a cached R)")
    else:
        R_old, cached = ctx.server.device.r_cache.get(*key), True
        if R_old is None:
            raise CacheMiss(f"no R of group {key[0]!r} at version {key[1]} on this server")
    res = ctx.server.device.run("incremental", _f64(arrays, "A"), _f64(arrays, "b"), R_old,
                                _f64(arrays, "A_delta"), r_resident=cached)
    return _reply(ctx, res, None if key is None else (key[0], key[1] + 1), cached)


def _int(job: dict, name: str, lo: int, hi: int) -> int:
    return checks.integer(f"job field {name!r}", job.get(name), lo, hi, error=BadRequestError)


def _key_jobs(args: dict, arrays: dict, max_features: int, max_bytes: int) -> list[tuple[int, int, int, int, int, bool]]:
    """The jobs of a ``train.keys`` request, checked against its arrays before any is read:
    ``(first key, n, new keys, prefix, feat, incremental)`` each.  The feature rows are read
    from ``keys`` by compiled code that trusts its offsets, so every offset is checked here;
    the feature rows the server builds from a few bytes per key may not exceed, together,
    its per-request array limit (TooLargeError: the client sends smaller batches); and the device is handed only finite inputs
    (rows built from bytes are, R_old is checked)."""
    jobs = args.get("jobs")
    if not isinstance(jobs, list) or not 1 <= len(jobs) <= MAX_KEY_JOBS:
        raise BadRequestError(f"'jobs' must be a list of 1..{MAX_KEY_JOBS} jobs")
    keys, offsets = arrays.get("keys"), arrays.get("offsets")
    if keys is None or offsets is None:
        raise BadRequestError("train.keys needs arrays 'keys' and 'offsets'")
    if keys.dtype != np.uint8 or keys.ndim != 1 or offsets.dtype != np.int64 or offsets.ndim != 1:
        raise BadRequestError("'keys' must be a uint8 vector and 'offsets' an int64 vector")
    if (len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != len(keys)
            or np.any(offsets[1:] < offsets[:-1])):
        raise BadRequestError("'offsets' must rise from 0 to the length of 'keys'")
    out, at, r_words, built = [], 0, 0, 0
    total = len(offsets) - 1
    for job in jobs:
        if not isinstance(job, dict):
            raise BadRequestError("every job must be an object")
        n = _int(job, "n", 1, total)
        new = _int(job, "new", 0, total)
        prefix = _int(job, "prefix", 0, 1 << 30)
        feat = _int(job, "feat", 0, max_features)
        incremental = job.get("incremental", False)
        if type(incremental) is not bool or (new and not incremental):
            raise BadRequestError("'incremental' must be a boolean, true for a job with new keys")
        built += (n + new) * (feat + 1) * 8
        if built > max_bytes:
            raise TooLargeError(f"the feature rows of the request's jobs exceed the server's limit of {max_bytes} bytes")
        if at + n + new > total:
            raise BadRequestError("the jobs name more keys than 'offsets' holds")
        out.append((at, n, new, prefix, feat, incremental))
        at += n + new
        r_words += (feat + 1) ** 2 if incremental else 0
    if at != total:
        raise BadRequestError("the jobs name fewer keys than 'offsets' holds")
    r_old = arrays.get("R_old")
    if r_words and (r_old is None or r_old.ndim != 1 or len(r_old) != r_words):
        raise BadRequestError(f"'R_old' must hold the {r_words} entries of the incremental jobs' factors")
    if r_words and not np.all(np.isfinite(r_old)):
        raise BadRequestError("arrays must be finite")
    return out


def _train_key_job(device, keys: np.ndarray, offsets: np.ndarray, job: tuple, R_old: np.ndarray | None) -> dict:
    """One job of a ``train.keys`` request on the emulated FPGA."""
    at, n, new, prefix, feat, _ = job
    return device.run_keys(KeysJob(keys, offsets[at:at + n + 1], prefix, feat, R_old, keys,
                                   offsets[at + n:at + n + new + 1]))


#: Threads that train the jobs of train.keys requests on the emulated FPGA (each job one
#: compiled call that releases the GIL); the device's slots bound its jobs.
_POOL = ThreadPoolExecutor(max(2, os.cpu_count() or 1), thread_name_prefix="learnedidx-train")


@handler("train.keys")
def train_keys(args, arrays, ctx):
    """Many groups' retrains in one request: each job names its keys in ``keys``/``offsets``
    (the group's n keys, then its new keys), its prefix and feature length; the cpu device
    fits them from the key bytes, the emulated FPGA trains feature rows built here (the same
    rows, and for cpu the same numbers).  Results in the jobs' order, concatenated:
    ``R`` (each job's (feat+1)² entries) and ``coef`` (feat+1 each); ``cycles`` per job."""
    device = ctx.server.device
    jobs = _key_jobs(args, arrays, device.max_features, ctx.server.config.max_array_bytes)
    keys, offsets = arrays["keys"], arrays["offsets"]
    r_old = _f64(arrays, "R_old") if "R_old" in arrays else np.zeros(0)
    if device.datapath is None:  # cpu: from the key bytes, in compiled calls over the cores
        R, coef, seconds = device.run_key_batch(keys, offsets, jobs, r_old)
        return ({"cycles": [0] * len(jobs), "device_seconds": 0.0, "host_seconds": seconds}, {"R": R, "coef": coef})
    olds, r_at = [], 0
    for job in jobs:
        w = job[4] + 1
        olds.append(r_old[r_at:r_at + w * w].reshape(w, w) if job[5] else None)
        r_at += w * w if job[5] else 0
    results = list(_POOL.map(lambda jr: _train_key_job(device, keys, offsets, *jr), zip(jobs, olds)))
    return ({"cycles": [int(r["cycles"]) for r in results],
             "device_seconds": sum(r["device_seconds"] for r in results),
             "host_seconds": sum(r["host_seconds"] for r in results)},
            {"R": np.concatenate([np.asarray(r["R"], np.float64).reshape(-1) for r in results]),
             "coef": np.concatenate([np.asarray(r["coef"], np.float64) for r in results])})


@on_start
def warm_up(server) -> None:
    """Compile the training kernels once at start (feature rows from keys, the device's full
    and incremental training), so that no request pays for it."""
    keys = np.frombuffer(bytearray(b"abcd"), np.uint8)  # writable, as a request's arrays are
    offsets = np.arange(5, dtype=np.int64)
    A = build_features(keys, offsets, 0, 4, 0, 1)
    server.device.warm_up(A, np.arange(4, dtype=np.float64))
