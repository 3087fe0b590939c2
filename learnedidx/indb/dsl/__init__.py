"""A small Python-embedded DSL for training algorithms (the four built-ins are written in it too).

An algorithm is a few lines of restricted Python in one of three shapes:

**SGD** (a per-tuple gradient; the engine threads' models are merged every epoch)::

    epochs = 30                 # passes over the data
    learning_rate = 0.5         # initial step size
    schedule = "invscaling"     # constant | invscaling (lr/sqrt(t)) | inverse (lr/(1+lr*l2*t)) | step
    batch_size = 32             # mini-batch size per engine thread
    merge = "average"           # merge of the engine threads' models per epoch: average | sum
    tolerance = 1e-6            # stop when the epoch loss changes less than this

    def gradient(w, x, y):      # per-tuple gradient of the loss at model w
        return (sigmoid(dot(w, x)) - y) * x

    def loss(w, x, y):          # optional, per-tuple loss for convergence and reporting
        z = dot(w, x)
        return log1p(exp(-abs(z))) + max(z, 0.0) - y * z

**Accumulators and an update** (closed forms, Newton): each ``acc_<name>(w, x, y)`` returns
a number, vector or matrix per tuple; the engine sums it over every tuple (each thread its
partition, then the threads' sums) and, once per epoch, ``update(w, n, <name>...)`` (plain
Python over the sums, may call ``solve``, ``lstsq``, ``eye``) returns the next model
(linear regression: ``acc_xx`` returns ``outer(x, x)``, ``acc_xy`` returns ``y * x``, and
``update(w, xx, xy)`` returns ``lstsq(xx, xy)``; see :mod:`.builtins`).

**Factors** (row/column-indexed parameters, e.g. matrix factorization on (row, col, value)
tuples): ``gradient_u(u, v, y)`` and ``gradient_v(u, v, y)`` are the gradients for the
tuple's row factor ``u = U[row]`` and column factor ``v = V[col]`` (``rank`` columns each,
initialised from N(0, ``init_scale``)); the threads' factor matrices are averaged per epoch.

``w`` is the model (a vector with the intercept first), ``x`` the tuple's features with a
leading 1, ``y`` its label (``labels = "binary"`` checks 0/1 labels, ``"signed"`` maps two
label values to -1/+1).  Allowed: arithmetic, comparisons, ``a if c else b``, local
assignments, and the functions in :data:`FUNCTIONS` (plus :data:`UPDATE_FUNCTIONS` in
``update``).  Anything else (imports, attribute access, loops, other names) is rejected, so
source text registered from SQL cannot run arbitrary code in the server.  The per-tuple
functions compile into one nogil Numba kernel per algorithm (:mod:`.kernels`) and into the
cycle model (:class:`learnedidx.accel.engine_model.KernelCost`).
"""
from __future__ import annotations

import ast
import copy
import threading
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from learnedidx.accel.engine_model import KernelCost
from learnedidx.errors import DSLError, UnknownAlgorithmError


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


@njit(cache=True, nogil=True)
def outer(a, b):
    return np.outer(a, b)


def _lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(a, b, rcond=None)[0]


#: Functions of the per-tuple code (compiled by Numba).
FUNCTIONS = {"dot": dot, "sigmoid": sigmoid, "sign": sign, "outer": outer, "exp": np.exp, "log": np.log,
             "log1p": np.log1p, "sqrt": np.sqrt, "abs": abs, "max": max, "min": min, "len": len}
#: Further functions of ``update`` (plain Python over the summed accumulators, once per epoch).
UPDATE_FUNCTIONS = {"solve": np.linalg.solve, "lstsq": _lstsq, "eye": np.eye}
NONLINEAR = {"sigmoid", "exp", "log", "log1p", "sqrt"}
SETTINGS = {"epochs": int, "learning_rate": float, "schedule": str, "batch_size": int, "merge": str,
            "tolerance": float, "l2": float, "labels": str, "rank": int, "init_scale": float}
DEFAULTS = {"epochs": 20, "learning_rate": 0.1, "schedule": "invscaling", "batch_size": 1, "merge": "average",
            "tolerance": 0.0, "l2": 0.0, "labels": "any", "rank": 10, "init_scale": 0.1}
#: merge: "average" the threads' models, or "sum" their updates (w + Σ (w_i - w)).
CHOICES = {"schedule": ("constant", "invscaling", "step", "inverse"), "merge": ("average", "sum"),
           "labels": ("any", "binary", "signed")}
#: MADlib's parameter names, accepted as training parameters for the settings they mean.
ALIASES = {"max_iter": "epochs", "num_iterations": "epochs", "stepsize": "learning_rate", "lambda": "l2",
           "max_rank": "rank", "scale_factor": "init_scale"}
TUPLE_ARGS = ["w", "x", "y"]
FACTOR_ARGS = ["u", "v", "y"]
_ALLOWED = (ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.Name, ast.Load,
            ast.Store, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Call, ast.Expr,
            ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
            ast.Eq, ast.NotEq, ast.BoolOp, ast.And, ast.Or, ast.Not, ast.Subscript, ast.Index if hasattr(ast, "Index") else ast.Constant)


@dataclass
class Algorithm:
    """A compiled algorithm: its shape (``sgd``, ``accumulate`` or ``factor``), settings,
    per-tuple functions (Numba), accumulator names, ``update`` and generated kernels."""

    name: str
    source: str
    settings: dict
    form: str
    cost: KernelCost
    namespace: dict  # compiled functions, and the code generator's split variants
    split: set  # per-tuple functions whose result is a scaled vector or rank-1 matrix
    accumulators: list[str] = field(default_factory=list)
    update_args: list[str] = field(default_factory=list)
    kernels: dict = field(default_factory=dict)  # (kernel, plan) -> compiled kernel
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def ops_per_tuple(self) -> int:
        return self.cost.vector_ops + self.cost.matrix_ops

    @property
    def has_loss(self) -> bool:
        return "loss" in self.namespace


def _setting(key: str, value, where: str = "") -> object:
    """``value`` as setting ``key``'s type, checked against its allowed choices."""
    try:
        v = SETTINGS[key](value)
    except (TypeError, ValueError):
        raise DSLError(f"{where}{key} must be {SETTINGS[key].__name__}, not {value!r}") from None
    if key in CHOICES and v not in CHOICES[key]:
        raise DSLError(f"{where}{key} must be one of {', '.join(CHOICES[key])}, not {v!r}")
    return v


def settings_for(alg: Algorithm, params: dict) -> dict:
    """Defaults, then the algorithm's settings, then training parameters (MADlib names too)."""
    given = {ALIASES.get(k, k): v for k, v in params.items() if v is not None}
    return {**DEFAULTS, **alg.settings,
            **{k: _setting(k, v, "parameter ") for k, v in given.items() if k in SETTINGS}}


def _calls(node: ast.AST) -> set[str]:
    return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call)}


def _check_function(stmt: ast.FunctionDef) -> str:
    """The kind of a top-level function (its role), checking its signature and body."""
    args = [a.arg for a in stmt.args.args]
    if stmt.decorator_list:
        raise DSLError("decorators are not allowed")
    if not stmt.body or not isinstance(stmt.body[-1], ast.Return) or stmt.body[-1].value is None:
        raise DSLError(f"line {stmt.lineno}: {stmt.name} must end with a return of its value")
    name = stmt.name
    if name == "update":
        return "update"
    if name in ("gradient_u", "gradient_v"):
        if args != FACTOR_ARGS:
            raise DSLError(f"line {stmt.lineno}: define {name}(u, v, y)")
    elif name == "loss":
        if args not in (TUPLE_ARGS, FACTOR_ARGS):
            raise DSLError(f"line {stmt.lineno}: define loss(w, x, y) (or loss(u, v, y) for factors)")
    elif name == "gradient" or (name.startswith("acc_") and name[4:].isidentifier()):
        if args != TUPLE_ARGS:
            raise DSLError(f"line {stmt.lineno}: define {name}(w, x, y)")
    else:
        raise DSLError(f"line {stmt.lineno}: define only gradient(w, x, y), loss(w, x, y), acc_<name>(w, x, y) "
                       "with update(w, ...), or gradient_u(u, v, y) and gradient_v(u, v, y)")
    bad = _calls(stmt) & set(UPDATE_FUNCTIONS)
    if bad:
        raise DSLError(f"line {stmt.lineno}: {', '.join(sorted(bad))} may be called in update only")
    return "tuple"


def _validate(tree: ast.Module) -> tuple[dict, dict[str, ast.FunctionDef]]:
    settings: dict = {}
    funcs: dict[str, ast.FunctionDef] = {}
    callable_ = set(FUNCTIONS) | set(UPDATE_FUNCTIONS)
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise DSLError(f"line {getattr(node, 'lineno', '?')}: {type(node).__name__} is not allowed in the DSL")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in callable_):
            raise DSLError(f"line {node.lineno}: only calls to {sorted(callable_)} are allowed")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise DSLError(f"line {node.lineno}: names starting with '_' are not allowed")
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            _check_function(stmt)
            funcs[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Constant):
            key = stmt.targets[0].id
            if key not in SETTINGS:
                raise DSLError(f"line {stmt.lineno}: unknown setting {key!r}; known: {sorted(SETTINGS)}")
            settings[key] = _setting(key, stmt.value.value, f"line {stmt.lineno}: ")
        else:
            raise DSLError(f"line {stmt.lineno}: top level may hold settings (name = constant) and functions only")
    return settings, funcs


def _form(funcs: dict[str, ast.FunctionDef]) -> tuple[str, list[str], list[str]]:
    """(shape, accumulator names, update's arguments) of a validated algorithm."""
    accs = [n[4:] for n in funcs if n.startswith("acc_")]
    if "gradient_u" in funcs or "gradient_v" in funcs:
        if not {"gradient_u", "gradient_v"} <= set(funcs) or set(funcs) - {"gradient_u", "gradient_v", "loss"}:
            raise DSLError("a factor algorithm defines gradient_u(u, v, y), gradient_v(u, v, y) and optionally loss")
        if [a.arg for a in funcs.get("loss", funcs["gradient_u"]).args.args] != FACTOR_ARGS:
            raise DSLError("a factor algorithm's loss is loss(u, v, y)")
        return "factor", [], []
    if "loss" in funcs and [a.arg for a in funcs["loss"].args.args] != TUPLE_ARGS:
        raise DSLError("loss(u, v, y) belongs to factor algorithms (gradient_u, gradient_v)")
    if accs:
        if "gradient" in funcs or "update" not in funcs:
            raise DSLError("an algorithm with accumulators defines update(w, ...) and no gradient")
        args = [a.arg for a in funcs["update"].args.args]
        unknown = [a for a in args if a not in ["w", "n"] + accs]
        if unknown or "w" not in args:
            raise DSLError(f"update takes w, n and accumulator names ({', '.join(accs)}), not {unknown or args}")
        return "accumulate", accs, args
    if "update" in funcs:
        raise DSLError("update(w, ...) needs accumulators: define acc_<name>(w, x, y)")
    if "gradient" not in funcs:
        raise DSLError("the algorithm must define gradient(w, x, y)")
    return "sgd", [], []


def _cost(funcs: dict[str, ast.FunctionDef]) -> KernelCost:
    """Per-tuple work for the cycle model: dot products and operators count per feature,
    outer products per feature²; exp/log/sigmoid take the nonlinear pipeline."""
    vector = matrix = 0
    nonlinear = False
    for name, fn in funcs.items():
        if name == "update":
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.BinOp):
                vector += 1
            elif isinstance(node, ast.Call):
                vector += node.func.id == "dot"
                matrix += node.func.id == "outer"
                nonlinear |= node.func.id in NONLINEAR
    solve = "update" in funcs and bool(_calls(funcs["update"]) & {"solve", "lstsq"})
    return KernelCost(max(1, vector), matrix, nonlinear, solve)


def _split(fn: ast.FunctionDef) -> ast.FunctionDef | None:
    """For ``return s * a`` (``a`` an argument) or ``return s * outer(a, b)``: a variant
    returning ``(s, a)`` / ``(s, a, b)``, so kernels accumulate without a temporary per tuple."""
    ret = fn.body[-1].value
    args = {a.arg for a in fn.args.args}
    pairs = []
    if isinstance(ret, ast.Call) and ret.func.id == "outer":
        pairs = [(ast.Constant(1.0), ret)]
    elif isinstance(ret, ast.BinOp) and isinstance(ret.op, ast.Mult):
        pairs = [(ret.left, ret.right), (ret.right, ret.left)]
    for scale, part in pairs:
        if isinstance(part, ast.Call) and part.func.id == "outer" and len(part.args) == 2 and not part.keywords:
            parts = [scale, *part.args]
        elif isinstance(part, ast.Name) and part.id in args:
            parts = [scale, part]
        else:
            continue
        new = copy.deepcopy(fn)
        new.name = fn.name + "__split"
        new.body[-1] = ast.Return(ast.Tuple([copy.deepcopy(p) for p in parts], ast.Load()))
        return ast.fix_missing_locations(new)
    return None


def compile_algorithm(name: str, source: str) -> Algorithm:
    """Validate ``source`` and compile its functions (the kernels are generated on first use)."""
    if not isinstance(source, str) or not source.strip():
        raise DSLError("empty algorithm source")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise DSLError(f"syntax error on line {exc.lineno}: {exc.msg}") from None
    settings, funcs = _validate(tree)
    form, accs, update_args = _form(funcs)
    split = {f.name: s for f in funcs.values() if f.name != "update" and (s := _split(f)) is not None}
    module = ast.Module(body=list(funcs.values()) + list(split.values()), type_ignores=[])
    ns: dict = {"np": np, "__builtins__": {}, **FUNCTIONS, **UPDATE_FUNCTIONS}
    exec(compile(module, f"<dsl:{name}>", "exec"), ns)  # validated: only arithmetic and whitelisted calls
    for fn in list(funcs) + [s.name for s in split.values()]:
        if fn != "update":  # update runs as Python, once per epoch
            ns[fn] = njit(nogil=True)(ns[fn])
    compiled = {k: v for k, v in ns.items() if k in funcs or k.endswith("__split")}
    return Algorithm(name, source, settings, form, _cost(funcs), compiled, set(split), accs, update_args)


_REGISTRY: dict[str, Algorithm] = {}
_BUILTINS: dict[str, Algorithm] = {}
_LOCK = threading.Lock()


def builtin(name: str) -> Algorithm:
    """A built-in algorithm (see :mod:`.builtins`), compiled once per process."""
    from learnedidx.indb.dsl.builtins import SOURCES

    with _LOCK:
        if name not in _BUILTINS:
            _BUILTINS[name] = compile_algorithm(name, SOURCES[name])
        return _BUILTINS[name]


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
        raise UnknownAlgorithmError(f"unknown algorithm {name!r}: register it first") from None


def train_registered(name_or_alg, data: dict, params: dict, *, threads: int = 2, seed: int = 0, stop=None):
    """Run a DSL algorithm (object or registered name) on the engine."""
    from learnedidx.indb.dsl.kernels import train

    alg = name_or_alg if isinstance(name_or_alg, Algorithm) else get_algorithm(name_or_alg)
    return train(alg, data, params, threads=threads, seed=seed, stop=stop)


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
