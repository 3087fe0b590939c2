"""YCSB's key generators, exact to the reference client (site.ycsb.generator).

All draws come from one ``numpy.random.Generator`` passed in, so a seed reproduces a run.
Hot loops are Numba kernels working on arrays of uniform doubles.
"""
from __future__ import annotations

import numpy as np
from numba import njit

ZIPFIAN_CONSTANT = 0.99
SCRAMBLED_ITEM_COUNT = 10_000_000_000
SCRAMBLED_ZETAN = 26.46902820178302


@njit(cache=True, nogil=True)
def fnvhash64(val: int) -> int:
    """YCSB Utils.fnvhash64: FNV-1a over the 8 little-endian bytes, signed wrap, then abs."""
    h = np.uint64(0xCBF29CE484222325)
    v = np.int64(val)
    for _ in range(8):
        octet = np.uint64(v & 0xFF)
        v = v >> 8
        h = h ^ octet
        h = h * np.uint64(1099511628211)
    s = np.int64(h)
    return -s if s < 0 else s


@njit(cache=True, nogil=True)
def fnvhash64_many(vals: np.ndarray) -> np.ndarray:
    out = np.empty(vals.shape[0], np.int64)
    for i in range(vals.shape[0]):
        out[i] = fnvhash64(vals[i])
    return out


@njit(cache=True)
def zeta(n: int, theta: float) -> float:
    s = 0.0
    for i in range(n):
        s += 1.0 / (i + 1) ** theta
    return s


@njit(cache=True, nogil=True)
def _zipf_one(u, items, theta, zetan, zeta2, alpha, eta) -> int:
    uz = u * zetan
    if uz < 1.0:
        return 0
    if uz < 1.0 + 0.5 ** theta:
        return 1
    return np.int64(items * (eta * u - eta + 1.0) ** alpha)


class Zipfian:
    """ZipfianGenerator(min, max, constant): item 0 (= min) is the most popular."""

    def __init__(self, lo: int, hi: int, theta: float = ZIPFIAN_CONSTANT, zetan: float | None = None) -> None:
        self.lo = lo
        self.items = hi - lo + 1
        self.theta = theta
        self.zeta2 = zeta(2, theta)
        self.alpha = 1.0 / (1.0 - theta)
        self.zetan = zeta(self.items, theta) if zetan is None else zetan
        self.eta = (1 - (2.0 / self.items) ** (1 - theta)) / (1 - self.zeta2 / self.zetan)

    def sample(self, u: np.ndarray) -> np.ndarray:
        return self.lo + _zipf_many(u, self.items, self.theta, self.zetan, self.zeta2, self.alpha, self.eta)


@njit(cache=True, nogil=True)
def _zipf_many(u, items, theta, zetan, zeta2, alpha, eta):
    out = np.empty(u.shape[0], np.int64)
    for i in range(u.shape[0]):
        out[i] = _zipf_one(u[i], items, theta, zetan, zeta2, alpha, eta)
    return out


class ScrambledZipfian:
    """ScrambledZipfianGenerator(min, max): ``ZipfianGenerator(0, ITEM_COUNT, 0.99, ZETAN)``, then
    ``min + fnvhash64(z) % itemcount``.  YCSB's quirk kept: the bounds are inclusive, so the inner
    generator has 10^10 + 1 items while ZETAN is zeta over 10^10 of them."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo = lo
        self.count = hi - lo + 1
        self.zipf = Zipfian(0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN)

    def sample(self, u: np.ndarray) -> np.ndarray:
        return self.lo + fnvhash64_many(self.zipf.sample(u)) % self.count


@njit(cache=True, nogil=True)
def skewed_latest(u: np.ndarray, last: np.ndarray, theta: float) -> np.ndarray:
    """SkewedLatestGenerator over the acknowledged-insert counter: ``max - zipfian.nextLong(max)``
    with ``max = last - 1`` (the highest acknowledged key number; ``last[i]`` keys exist before
    draw i).  Quirks of ZipfianGenerator kept: it is built with ``items = last[0] - 1``; when
    the counter grows, zeta is extended incrementally but eta keeps using the original
    ``items``.  So key 0 is never drawn (unless it is the only key)."""
    out = np.empty(u.shape[0], np.int64)
    zeta2 = 1.0 + 1.0 / 2.0 ** theta  # zeta(2, theta), summed as YCSB does
    alpha = 1.0 / (1.0 - theta)
    items = last[0] - 1 if u.shape[0] else 0
    zetan = 0.0
    for j in range(items):
        zetan += 1.0 / (j + 1) ** theta
    count = items
    eta = (1 - (2.0 / items) ** (1 - theta)) / (1 - zeta2 / zetan) if items > 2 else 0.0
    for i in range(u.shape[0]):
        top = last[i] - 1
        if top < 1:
            out[i] = 0
            continue
        if top > count:
            for j in range(count, top):
                zetan += 1.0 / (j + 1) ** theta
            count = top
            if items > 2:
                eta = (1 - (2.0 / items) ** (1 - theta)) / (1 - zeta2 / zetan)
        z = _zipf_one(u[i], top, theta, zetan, zeta2, alpha, eta)
        out[i] = max(top - z, 0)
    return out


def hotspot(u: np.ndarray, u2: np.ndarray, lo: int, hi: int, hot_set_fraction: float = 0.2,
            hot_op_fraction: float = 0.8) -> np.ndarray:
    """HotspotIntegerGenerator."""
    interval = hi - lo + 1
    hot = int(interval * hot_set_fraction)
    cold = interval - hot
    pick_hot = u < hot_op_fraction
    return np.where(pick_hot, lo + (u2 * hot).astype(np.int64), lo + hot + (u2 * cold).astype(np.int64))


def exponential(u: np.ndarray, count: int, percentile: float = 95.0, fraction: float = 0.8571428571) -> np.ndarray:
    """ExponentialGenerator(percentile, count * fraction): ``-ln(u) / gamma`` with
    ``gamma = -ln(1 - percentile/100) / (count * fraction)``, truncated to an integer (CoreWorkload
    subtracts it from the last acknowledged key number)."""
    gamma = -np.log(1.0 - percentile / 100.0) / (count * fraction)
    return (-np.log(u) / gamma).astype(np.int64)


def key_name(keynum: int, hashed: bool = True, zeropadding: int = 1) -> bytes:
    """CoreWorkload.buildKeyName: ``"user"`` + the (hashed) number, zero-padded to ``zeropadding``."""
    return key_names(np.array([keynum]), hashed, zeropadding)[0]


def key_names(keynums: np.ndarray, hashed: bool = True, zeropadding: int = 1) -> list[bytes]:
    vals = fnvhash64_many(np.asarray(keynums, np.int64)) if hashed else np.asarray(keynums, np.int64)
    return [b"user" + str(v).zfill(zeropadding).encode() for v in vals.tolist()]
