"""A small Python-embedded DSL for user training algorithms (SGD family).

An algorithm is a few lines of restricted Python::

    epochs = 30                 # passes over the data
    learning_rate = 0.5         # initial step size
    schedule = "invscaling"     # constant | invscaling (lr / sqrt(t)) | step (halve every 10 epochs)
    batch_size = 32             # mini-batch size per engine thread
    merge = "average"           # merge of the engine threads' models per epoch: average | sum
    tolerance = 1e-6            # stop when the epoch loss changes less than this

    def gradient(w, x, y):      # per-tuple gradient of the loss at model w
        return (sigmoid(dot(w, x)) - y) * x

    def loss(w, x, y):          # optional, per-tuple loss for convergence and reporting
        z = dot(w, x)
        return log1p(exp(-z)) + z - y * z if z < 0 else log1p(exp(-z)) + (1 - y) * z

``w`` is the model (a vector with the intercept first), ``x`` the tuple's features with a
leading 1, ``y`` its label.  Allowed: arithmetic, comparisons, ``a if c else b``, local
assignments, and the functions in :data:`FUNCTIONS`.  Anything else (imports, attribute
access, loops, other names) is rejected, so source text registered from SQL cannot run
arbitrary code in the server.  The source compiles into a Numba kernel for the engine
(an epoch loop around the user's gradient) and into the cycle model (operations per tuple).
"""
from __future__ import annotations

import ast
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from numba import njit

from learnedidx.errors import InDBError


class DSLError(InDBError, ValueError):
    """The algorithm's source is not valid DSL."""

    kind = "bad-request"


@njit(cache=True, nogil=True)
def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


@njit(cache=True, nogil=True)
def dot(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit(cache=True, nogil=True)
def sign(z):
    return 1.0 if z > 0 else (-1.0 if z < 0 else 0.0)


FUNCTIONS = {"dot": dot, "sigmoid": sigmoid, "sign": sign, "exp": np.exp, "log": np.log, "log1p": np.log1p,
             "sqrt": np.sqrt, "abs": abs, "max": max, "min": min}
SETTINGS = {"epochs": int, "learning_rate": float, "schedule": str, "batch_size": int, "merge": str,
            "tolerance": float, "l2": float}
#: merge: "average" the threads' models, or "sum" their updates (w + Σ (w_i - w)).
CHOICES = {"schedule": ("constant", "invscaling", "step"), "merge": ("average", "sum")}
_ALLOWED = (ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.Name, ast.Load,
            ast.Store, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Call, ast.Expr,
            ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
            ast.Eq, ast.NotEq, ast.BoolOp, ast.And, ast.Or, ast.Not, ast.Subscript, ast.Index if hasattr(ast, "Index") else ast.Constant)


@dataclass
class Algorithm:
    name: str
    source: str
    settings: dict
    ops_per_tuple: int
    kernel: object
    loss_fn: object | None


def _setting(key: str, value, where: str = "") -> object:
    """``value`` as setting ``key``'s type, checked against its allowed choices."""
    try:
        v = SETTINGS[key](value)
    except (TypeError, ValueError):
        raise DSLError(f"{where}{key} must be {SETTINGS[key].__name__}, not {value!r}") from None
    if key in CHOICES and v not in CHOICES[key]:
        raise DSLError(f"{where}{key} must be one of {', '.join(CHOICES[key])}, not {v!r}")
    return v


def _validate(tree: ast.Module) -> tuple[dict, set]:
    settings: dict = {}
    funcs: set = set()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise DSLError(f"line {getattr(node, 'lineno', '?')}: {type(node).__name__} is not allowed in the DSL")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise DSLError(f"line {node.lineno}: only calls to {sorted(FUNCTIONS)} are allowed")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise DSLError(f"line {node.lineno}: names starting with '_' are not allowed")
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            if stmt.name not in ("gradient", "loss") or [a.arg for a in stmt.args.args] != ["w", "x", "y"]:
                raise DSLError(f"line {stmt.lineno}: define only gradient(w, x, y) and loss(w, x, y)")
            if stmt.decorator_list:
                raise DSLError("decorators are not allowed")
            funcs.add(stmt.name)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Constant):
            key = stmt.targets[0].id
            if key not in SETTINGS:
                raise DSLError(f"line {stmt.lineno}: unknown setting {key!r}; known: {sorted(SETTINGS)}")
            settings[key] = _setting(key, stmt.value.value, f"line {stmt.lineno}: ")
        else:
            raise DSLError(f"line {stmt.lineno}: top level may hold settings (name = constant) and functions only")
    if "gradient" not in funcs:
        raise DSLError("the algorithm must define gradient(w, x, y)")
    return settings, funcs


def _ops_per_tuple(tree: ast.Module) -> int:
    """Operations per tuple for the cycle model: dot products count per feature (×16 nominal)."""
    ops = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            ops += 1
        elif isinstance(node, ast.Call):
            ops += 16 if node.func.id == "dot" else 4
    return ops


_EPOCH_TEMPLATE = '''
def _epoch(X, y, w, lr0, schedule, t0, order, batch, l2):
    d = X.shape[1]
    g = np.zeros(d)
    nb = 0
    t = t0
    for k in range(order.shape[0]):
        i = order[k]
        g += gradient(w, X[i], y[i])
        nb += 1
        if nb == batch or k == order.shape[0] - 1:
            t += 1
            if schedule == 1:
                lr = lr0 / np.sqrt(t)
            else:
                lr = lr0
            for a in range(d):
                w[a] -= lr * (g[a] / nb + l2 * w[a] * (a > 0))
                g[a] = 0.0
            nb = 0
    return w
'''

_LOSS_TEMPLATE = '''
def _loss_sum(X, y, w):
    s = 0.0
    for i in range(X.shape[0]):
        s += loss(w, X[i], y[i])
    return s
'''

_REGISTRY: dict[str, Algorithm] = {}
_LOCK = threading.Lock()


def compile_algorithm(name: str, source: str) -> Algorithm:
    """Validate ``source`` and compile it into the engine's Numba kernels."""
    if not isinstance(source, str) or not source.strip():
        raise DSLError("empty algorithm source")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise DSLError(f"syntax error on line {exc.lineno}: {exc.msg}") from None
    settings, funcs = _validate(tree)
    ns: dict = {"np": np, "__builtins__": {}}
    ns.update({k: v for k, v in FUNCTIONS.items()})
    exec(compile(tree, f"<dsl:{name}>", "exec"), ns)  # validated: only arithmetic and whitelisted calls
    ns["gradient"] = njit(nogil=True)(ns["gradient"])
    if "loss" in funcs:
        ns["loss"] = njit(nogil=True)(ns["loss"])
    exec(_EPOCH_TEMPLATE, ns)
    kernel = njit(nogil=True)(ns["_epoch"])
    loss_fn = None
    if "loss" in funcs:
        exec(_LOSS_TEMPLATE, ns)
        loss_fn = njit(nogil=True)(ns["_loss_sum"])
    return Algorithm(name, source, settings, _ops_per_tuple(tree), kernel, loss_fn)


def register_algorithm(name: str, source: str) -> Algorithm:
    """Compile ``source`` (unless registered unchanged already) and register it under ``name``."""
    if not name or not name.replace("_", "").isalnum():
        raise DSLError("algorithm names are letters, digits and underscores")
    from learnedidx.indb.engine import ALGORITHMS

    if name in ALGORITHMS:
        raise DSLError(f"{name} is a built-in algorithm")
    with _LOCK:
        known = _REGISTRY.get(name)
    if known is not None and known.source == source:
        return known  # unchanged source: no recompilation
    alg = compile_algorithm(name, source)
    with _LOCK:
        _REGISTRY[name] = alg
    return alg


def get_algorithm(name: str) -> Algorithm:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise DSLError(f"unknown algorithm {name!r}: register it first") from None


def train_registered(name_or_alg, data: dict, params: dict, *, threads: int = 2, seed: int = 0, stop=None):
    """Run a DSL algorithm on the engine: per-thread SGD over partitions, merged each epoch."""
    from learnedidx.accel.engine_model import CLOCK_MHZ, UNITS
    from learnedidx.indb.engine import TrainOutput, _check, _design, _partitions, rounds

    alg = name_or_alg if isinstance(name_or_alg, Algorithm) else get_algorithm(name_or_alg)
    s = {"epochs": 20, "learning_rate": 0.1, "schedule": "invscaling", "batch_size": 1, "merge": "average",
         "tolerance": 0.0, "l2": 0.0, **alg.settings,
         **{k: _setting(k, v, "parameter ") for k, v in params.items() if k in SETTINGS}}
    X = _design(data["X"], params)
    y = np.ascontiguousarray(data["y"], np.float64)
    _check(X, y)
    rng = np.random.default_rng(seed)
    parts = _partitions(len(y), threads)
    w = np.zeros(X.shape[1])
    sched = 1 if s["schedule"] == "invscaling" else 0
    t0 = time.perf_counter()
    prev = np.inf
    loss = float("nan")
    ep = 0
    with ThreadPoolExecutor(len(parts)) as ex:
        for ep in rounds(1, int(s["epochs"]), stop):
            lr = s["learning_rate"] * (0.5 ** ((ep - 1) // 10) if s["schedule"] == "step" else 1.0)
            orders = [rng.permutation(np.arange(p.start, p.stop)) for p in parts]
            tbase = (ep - 1) * max(1, len(orders[0]) // max(1, int(s["batch_size"])))
            models = list(ex.map(lambda o: alg.kernel(X, y, w.copy(), lr, sched, tbase, o,
                                                      int(s["batch_size"]), float(s["l2"])), orders))
            w = np.mean(models, axis=0) if s["merge"] == "average" else w + np.sum(models, axis=0) - len(models) * w
            if alg.loss_fn is not None:
                loss = float(alg.loss_fn(X, y, w)) / len(y)
                if abs(prev - loss) < s["tolerance"]:
                    break
                prev = loss
    cycles = ep * (int(np.ceil(len(y) / UNITS)) * max(1, alg.ops_per_tuple * X.shape[1] // 16))
    return TrainOutput({"coef": w}, loss, ep, len(y), time.perf_counter() - t0, cycles / (CLOCK_MHZ * 1e6),
                       {"settings": s})


def register(conn_or_engine, name: str, source: str) -> None:
    """Register a DSL algorithm in a database (psycopg connection or SQLAlchemy engine)."""
    compile_algorithm(name, source)  # fail early, with the DSL's message
    query = "SELECT learnedidx.register_algorithm(%(name)s, %(source)s)"
    if hasattr(conn_or_engine, "execute") and hasattr(conn_or_engine, "cursor"):  # psycopg
        conn_or_engine.execute(query, {"name": name, "source": source})
        return
    from sqlalchemy import text

    with conn_or_engine.begin() as c:
        c.execute(text("SELECT learnedidx.register_algorithm(:name, :source)"), {"name": name, "source": source})
