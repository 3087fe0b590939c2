"""Accelerator-server handlers for training requests: ``train.full``, ``train.incremental``.

A request may name the group its R factor belongs to (``args.group``, ``args.version``):
the device then keeps the resulting R (:class:`~learnedidx.server.device.RCache`), and a
later ``train.incremental`` of that group may omit ``R_old`` — the memoized R stays on the
device instead of travelling with every request.
"""
from __future__ import annotations

import numpy as np

from learnedidx.errors import CacheMiss
from learnedidx.server.registry import HandlerContext, handler


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
