"""YCSB's key generators, exact to the reference client (site.ycsb.generator).

All draws come from one ``numpy.random.Generator`` passed in, so a seed reproduces a run.
Hot loops are Numba kernels working on arrays of uniform doubles.
"""
from __future__ import annotations

import numpy as np
from numba import njit

FNV_OFFSET_BASIS_64 = np.uint64(0xCBF29CE484222325)
FNV_PRIME_64 = np.uint64(1099511628211)
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
    """ScrambledZipfianGenerator: Zipfian over 10^10 items, then fnvhash64 % itemcount."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo = lo
        self.count = hi - lo + 1
        self.zipf = Zipfian(0, SCRAMBLED_ITEM_COUNT - 1, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN)

    def sample(self, u: np.ndarray) -> np.ndarray:
        return self.lo + fnvhash64_many(self.zipf.sample(u)) % self.count


@njit(cache=True, nogil=True)
def skewed_latest(u: np.ndarray, last: np.ndarray, theta: float) -> np.ndarray:
    """SkewedLatestGenerator: last - zipfian(last) with the Zipfian's zeta grown incrementally
    as the insert counter advances (YCSB's ZipfianGenerator.nextLong(itemcount) quirk: zeta is
    recomputed incrementally when the item count grows)."""
    out = np.empty(u.shape[0], np.int64)
    zeta2 = 1.0 + 1.0 / 2.0 ** theta
    alpha = 1.0 / (1.0 - theta)
    count = 0
    zetan = 0.0
    for i in range(u.shape[0]):
        n = last[i]
        if n < 1:
            out[i] = 0
            continue
        if n > count:
            for j in range(count, n):
                zetan += 1.0 / (j + 1) ** theta
            count = n
        eta = (1 - (2.0 / count) ** (1 - theta)) / (1 - zeta2 / zetan) if count > 2 else 0.0
        z = _zipf_one(u[i], count, theta, zetan, zeta2, alpha, eta)
        if z >= n:
            z = n - 1
        out[i] = (n - 1) - z
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
    """ExponentialGenerator (gamma = -ln(1 - percentile/100) / (count * fraction))."""
    gamma = -np.log(1.0 - percentile / 100.0) / (count * fraction)
    return (-np.log(u) / gamma).astype(np.int64)


def key_name(keynum: int, hashed: bool = True, prefix: str = "user", zeropadding: int = 1) -> bytes:
    """CoreWorkload.buildKeyName."""
    v = fnvhash64(keynum) if hashed else keynum
    return (prefix + str(v).zfill(zeropadding)).encode()


def key_names(keynums: np.ndarray, hashed: bool = True, prefix: str = "user") -> list[bytes]:
    vals = fnvhash64_many(np.asarray(keynums, np.int64)) if hashed else np.asarray(keynums, np.int64)
    p = prefix.encode()
    return [p + str(v).encode() for v in vals.tolist()]
