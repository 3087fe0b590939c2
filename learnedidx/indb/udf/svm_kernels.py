"""MADlib 2.1's random feature maps of svm's ``gaussian`` and ``polynomial`` kernels: the same
kernel parameters draw the same random numbers as MADlib, so the same call trains the same
model.  What MADlib defines, and this module reproduces:

* the random numbers come from Boost.Random 1.74 (MADlib's ``matrix_random`` calls
  ``__normal_vector``, ``__uniform_vector`` and ``__bernoulli_vector``): the ``minstd_rand``
  engine (Park and Miller's multiplier 48271 modulo 2^31 - 1) seeded with ``random_state + 1``
  (``matrix_random`` adds the row number, 1 for a one-row matrix; each vector has its own
  engine), the ziggurat normal and exponential distributions (Marsaglia and Tsang's, 128 and
  256 layers; the tables follow from their two first abscissae, below), ``uniform_real`` and
  ``bernoulli_distribution``;
* gaussian (random Fourier features): ``n_components`` values ``sqrt(2 / n) * cos(w_k . x +
  b_k)``, each ``w_k`` ``n_features`` draws of N(0, 2 gamma), ``b`` uniform in [0, 2 pi);
  ``fit_in_memory=false`` draws the weights feature by feature instead (one engine per feature,
  seeded ``random_state + feature``);
* polynomial (random Maclaurin features): Python's ``random`` seeded with ``random_state``
  draws each component's degree ``int(log2(1 / u))``; a component of degree 1..``degree`` is the
  product of that many dot products with random +-1 vectors (Bernoulli draws), times
  ``sqrt(a_k 2^(k+1))`` where ``a_k`` is MADlib's Maclaurin coefficient of ``(coef0 + t)^degree``
  (its binomial coefficient divides by ``(k + 1)!``, not ``k!``: MADlib's definition, kept so
  that models match); degree 0 gives the constant ``sqrt(2 a_0)``, a larger one 0; all times
  ``sqrt(1 / n)``, the constants last.

:func:`gaussian` and :func:`polynomial` return a :class:`Mapping`: the arrays the extension's C
function ``learnedidx._svm_features`` applies to a row (the same in training and in
``svm_predict``) and the rows of MADlib's ``<model>_random`` table.  The standard library only:
the extension's PL/Python functions import this module.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from functools import lru_cache

#: boost::minstd_rand
_A, _M = 48271, 2147483647
_MIN, _MAX = 1, _M - 1
#: The ziggurats' first two abscissae (the base layer's width and where the tail begins), as
#: Boost.Random gives them; the other layers follow (:func:`_ziggurat`).
_NORMAL_X01 = ("3.7130862467403632609", "3.4426198558966521214")
_EXPONENTIAL_X01 = ("8.6971174701310497140", "7.6971174701310497140")


class Minstd:
    """boost::minstd_rand: x <- 48271 x mod (2^31 - 1), seeded as Boost seeds it."""

    def __init__(self, seed: int) -> None:
        x = (seed % (1 << 32)) % _M  # the seed converted to the engine's uint32_t first
        self.x = x if x else 1

    def __call__(self) -> int:
        self.x = self.x * _A % _M
        return self.x


def uniform01(eng: Minstd) -> float:
    """boost::random::uniform_01<double> of an integer engine."""
    while True:
        r = float(eng() - _MIN) * (1.0 / (float(_MAX - _MIN) + 1.0))
        if r < 1.0:
            return r


def uniform_real(eng: Minstd, lo: float, hi: float) -> float:
    """boost::uniform_real<double>(lo, hi)."""
    while True:
        r = float(eng() - _MIN) / (float(_MAX - _MIN) + 1.0) * (hi - lo) + lo
        if r < hi:
            return r


def bernoulli(eng: Minstd, p: float = 0.5) -> bool:
    """boost::bernoulli_distribution<>(p)."""
    return p != 0.0 and float(eng() - _MIN) <= p * float(_MAX - _MIN)


def _digit(eng: Minstd) -> int:
    """30 uniform bits (Boost's generate_one_digit: draws above 2^30 - 1 are rejected)."""
    while True:
        u = eng() - _MIN
        if u < (1 << 30):
            return u


def _int_float_pair(eng: Minstd) -> tuple[float, int]:
    """Boost's generate_int_float_pair<double, 8> for minstd_rand (30 bits a draw): 8 bits of
    layer and sign, and a double in [0, 1) built from three more draws, low bits first."""
    u = _digit(eng)
    bucket = u & 0xFF
    r = float(u >> 8) * (1.0 / float(1 << 22))
    r += _digit(eng)
    r *= 0.5 / float(1 << 29)
    r += _digit(eng) & 1
    return r * 0.5, bucket


@lru_cache(maxsize=None)
def _ziggurat(kind: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(x, y) of a ziggurat with its layers of equal area v = x_0 f(x_1): x_{i+1} =
    f^-1(f(x_i) + v / x_i), y_i = f(x_i) (y_0 = 0), ending at x = 0; computed to 50 digits, as
    exact as Boost's printed tables once rounded to doubles."""
    with localcontext() as ctx:
        ctx.prec = 50
        if kind == "normal":
            (x0, x1), n = _NORMAL_X01, 129

            def f(t):
                return (-(t * t) / 2).exp()

            def finv(t):
                return (-2 * t.ln()).sqrt()
        else:
            (x0, x1), n = _EXPONENTIAL_X01, 257

            def f(t):
                return (-t).exp()

            def finv(t):
                return -t.ln()
        xs = [Decimal(x0), Decimal(x1)]
        v = xs[0] * f(xs[1])
        while len(xs) < n - 1:
            xs.append(finv(f(xs[-1]) + v / xs[-1]))
        xs.append(Decimal(0))
        return tuple(float(t) for t in xs), (0.0,) + tuple(float(f(t)) for t in xs[1:])


def _exponential(eng: Minstd) -> float:
    """boost::random::exponential_distribution<double>(1): a ziggurat of 256 layers."""
    tx, ty = _ziggurat("exponential")
    shift = 0.0
    while True:
        r, i = _int_float_pair(eng)
        x = r * tx[i]
        if x < tx[i + 1]:
            return shift + x
        if i == 0:  # the tail is the exponential again, shifted
            shift += tx[1]
            continue
        y01 = uniform01(eng)
        y = ty[i] + y01 * (ty[i + 1] - ty[i])
        above_upper = (tx[i] - tx[i + 1]) * y01 - (tx[i] - x)
        above_lower = y - (ty[i + 1] + (tx[i + 1] - x) * ty[i + 1])
        if above_upper < 0 and (above_lower < 0 or y < math.exp(-x)):
            return x + shift


def normal(eng: Minstd, mu: float = 0.0, sigma: float = 1.0) -> float:
    """boost::random::normal_distribution<double>(mu, sigma): a ziggurat of 128 layers."""
    tx, ty = _ziggurat("normal")
    while True:
        r, i = _int_float_pair(eng)
        sign = (i & 1) * 2 - 1
        i >>= 1
        x = r * tx[i]
        if x < tx[i + 1]:
            return x * sign * sigma + mu
        if i == 0:  # the tail, beyond x_1: by rejection from a shifted exponential
            while True:
                t = _exponential(eng) / tx[1]
                e = _exponential(eng) / 1.0
                if 2 * e > t * t:
                    return (t + tx[1]) * sign * sigma + mu
        y01 = uniform01(eng)
        y = ty[i] + y01 * (ty[i + 1] - ty[i])
        if tx[i] >= 1:  # convex layers (and the inflection's)
            above_upper = (tx[i] - tx[i + 1]) * y01 - (tx[i] - x)
            above_lower = y - (ty[i] + (tx[i] - x) * ty[i] * tx[i])
        else:  # concave
            above_lower = (tx[i] - tx[i + 1]) * y01 - (tx[i] - x)
            above_upper = y - (ty[i] + (tx[i] - x) * ty[i] * tx[i])
        if above_upper < 0 and (above_lower < 0 or y < math.exp(-(x * x / 2))):
            return x * sign * sigma + mu


def normal_vector(n: int, mu: float, sigma: float, seed: int) -> list[float]:
    """MADlib's ``__normal_vector(n, mu, sigma, seed)``."""
    eng = Minstd(seed)
    return [normal(eng, mu, sigma) for _ in range(n)]


def uniform_vector(n: int, lo: float, hi: float, seed: int) -> list[float]:
    """MADlib's ``__uniform_vector(n, lo, hi, seed)``."""
    eng = Minstd(seed)
    return [uniform_real(eng, lo, hi) for _ in range(n)]


def bernoulli_vector(n: int, upper: float, lower: float, p: float, seed: int) -> list[float]:
    """MADlib's ``__bernoulli_vector(n, upper, lower, p, seed)``."""
    eng = Minstd(seed)
    return [upper if bernoulli(eng, p) else lower for _ in range(n)]


@dataclass
class Mapping:
    """A random feature map: ``features(x)`` is, for the gaussian kernel, ``scale * cos(W x +
    offsets)``; for the polynomial kernel, ``scale * [products of (W x) over consecutive runs
    of ``reps`` values, times offsets[:len(reps)]; offsets[len(reps):]]``; then a trailing 1
    with ``intercept``.  ``weights`` holds W row by row (one row of ``n_features`` per
    component or factor); ``random_rows`` are MADlib's ``<model>_random`` table (id, val, desp)."""

    kernel: str
    n_features: int
    n_components: int
    weights: list[float]
    offsets: list[float]
    reps: list[int]
    scale: float
    intercept: bool
    random_rows: list[tuple[int, list[float], str]] = field(default_factory=list)


def gaussian(n_features: int, n_components: int, gamma: float, random_state: int, intercept: bool,
             in_memory: bool = True) -> Mapping:
    """MADlib's GaussianKernelInMemory (or, ``in_memory`` false, GaussianKernel) fitted to
    ``n_features`` features."""
    sigma = math.sqrt(2 * gamma)
    offsets = uniform_vector(n_components, 0.0, 2 * math.pi, random_state + 1)
    if in_memory:  # one vector, component after component
        weights = normal_vector(n_features * n_components, 0.0, sigma, random_state + 1)
        rows = [(1, weights, "weights")]
    else:  # one vector per feature, over the components
        per_feature = [normal_vector(n_components, 0.0, sigma, random_state + r) for r in range(1, n_features + 1)]
        weights = [per_feature[i][k] for k in range(n_components) for i in range(n_features)]
        rows = [(r + 1, v, "weights") for r, v in enumerate(per_feature)]
    return Mapping("gaussian", n_features, n_components, weights, offsets, [], math.sqrt(2.0 / n_components),
                   intercept, rows + [(1, offsets, "offsets")])


def _madlib_ncr(n: int, r: int) -> int:
    """MADlib's ``ncr``: n!/(n-r)! divided by (r + 1)!, not r!."""
    r = min(r, n - r)
    if r == 0:
        return 1
    return math.prod(range(n, n - r, -1)) // math.factorial(r + 1)


def polynomial(n_features: int, n_components: int, degree: int, coef0: float, random_state: int,
               intercept: bool) -> Mapping:
    """MADlib's PolyKernel fitted to ``n_features`` features."""
    coefs = [math.sqrt((_madlib_ncr(degree, k) * coef0 ** (degree - k) if coef0 != 0 else 0.0) * 2 ** (k + 1))
             for k in range(degree + 1)]
    draw = random.Random(random_state).random
    reps = [int(math.log(1.0 / draw(), 2)) for _ in range(n_components)]
    reps_nz = [r for r in reps if 0 < r <= degree]
    factors = sum(reps_nz)
    weights = bernoulli_vector(factors * n_features, 1.0, -1.0, 0.5, random_state + 1) if factors else []
    scaled = [coefs[r] for r in reps_nz]
    constants = [coefs[0]] * reps.count(0) + [0.0] * sum(1 for r in reps if r > degree)
    rows = [(1, scaled, "coefs"), (1, weights, "weights"), (1, [float(r) for r in reps_nz], "reps"),
            (1, constants, "other_features")]
    return Mapping("polynomial", n_features, n_components, weights, scaled + constants, reps_nz,
                   math.sqrt(1.0 / n_components), intercept, rows)
