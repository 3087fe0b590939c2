"""The DSL compiler: parse and validate an algorithm's source, find its shape, count its
per-tuple work for the cycle model, and compile its functions with Numba.

Kernels are generated from the compiled functions on first use (:mod:`.kernels`).
"""
from __future__ import annotations

import ast
import copy
import threading
import types
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from learnedidx.accel.engine_model import KernelCost
from learnedidx.errors import (DSLDivisionByZeroError, DSLError, DSLOverflowError, DSLRuntimeError,
                               LearnedIdxError)
from learnedidx.indb.dsl.functions import FUNCTIONS, NONLINEAR, UPDATE_FUNCTIONS
from learnedidx.indb.dsl.settings import SETTINGS, checked

TUPLE_ARGS = ["w", "x", "y"]
FACTOR_ARGS = ["u", "v", "y"]
_ALLOWED = (ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.Name, ast.Load,
            ast.Store, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Call, ast.Expr,
            ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
            ast.Eq, ast.NotEq, ast.BoolOp, ast.And, ast.Or, ast.Not, ast.Subscript,
            ast.Index if hasattr(ast, "Index") else ast.Constant)


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
    symmetric: set = field(default_factory=set)  # split functions of the form s * outer(a, a)
    update_returns: int = 1  # values update returns: the model, or the model and its loss
    kernels: dict = field(default_factory=dict)  # (kernel, plan) -> compiled kernel
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def ops_per_tuple(self) -> int:
        return self.cost.vector_ops + self.cost.matrix_ops

    @property
    def has_loss(self) -> bool:
        return "loss" in self.namespace

    @property
    def update_gives_loss(self) -> bool:
        """``update`` returns ``(w, loss)``: the loss of its model, from the sums alone."""
        return self.update_returns == 2


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
    # update may return the model and its loss: ``return w, loss``
    pairs = {id(f.body[-1].value) for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "update"
             and f.body and isinstance(f.body[-1], ast.Return) and isinstance(f.body[-1].value, ast.Tuple)}
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED) and id(node) not in pairs:
            raise DSLError(f"line {getattr(node, 'lineno', '?')}: {type(node).__name__} is not allowed in the DSL")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in callable_):
            raise DSLError(f"line {node.lineno}: only calls to {sorted(callable_)} are allowed")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise DSLError(f"line {node.lineno}: names starting with '_' are not allowed")
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            _check_function(stmt)
            for node in ast.walk(stmt):  # strings belong to settings; in code they only build big values
                if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
                    raise DSLError(f"line {node.lineno}: only numbers are allowed in functions")
            funcs[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Constant):
            key = stmt.targets[0].id
            if key not in SETTINGS:
                raise DSLError(f"line {stmt.lineno}: unknown setting {key!r}; known: {sorted(SETTINGS)}")
            settings[key] = checked(key, stmt.value.value, f"line {stmt.lineno}: ")
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
        ret = funcs["update"].body[-1].value
        if isinstance(ret, ast.Tuple) and len(ret.elts) != 2:
            raise DSLError("update returns the model, or the model and its loss: w, loss")
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


def _symmetric(split: ast.FunctionDef) -> bool:
    """Whether a split variant returns ``(s, a, a)``: a rank-1 matrix symmetric by construction."""
    parts = split.body[-1].value.elts
    return len(parts) == 3 and all(isinstance(p, ast.Name) for p in parts[1:]) and parts[1].id == parts[2].id


def split_variant(fn: ast.FunctionDef) -> ast.FunctionDef | None:
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


class _FixedWidth(ast.NodeTransformer):
    """Integer literals become int64: ``update`` runs as Python, where ``3 ** 40000000`` on
    Python's unbounded integers would hold the GIL for minutes; on int64 it takes nanoseconds."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if type(node.value) is int:
            return ast.copy_location(ast.Call(ast.Name("_int64", ast.Load()), [node], []), node)
        return node


class _CheckedDivision(ast.NodeTransformer):
    """``a / b`` becomes ``_div(a, b)``: on numpy's scalars (int64 literals, the sums) a division
    by zero gives inf, where the per-tuple functions (Numba) raise; ``update`` must raise too."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Div):
            return ast.copy_location(ast.Call(ast.Name("_div", ast.Load()), [node.left, node.right], []), node)
        return node


def _div(a, b):
    """``a / b``, raising ZeroDivisionError for a zero scalar divisor as Numba does (arrays
    divide elementwise, as in the per-tuple functions: inf and NaN are values)."""
    if np.ndim(b) == 0 and b == 0:
        raise ZeroDivisionError("division by zero")
    return a / b


def _bounded_update(fn, namespace: dict):
    """``update`` as the engine calls it: integers of fixed width (its arguments, ``len``, its
    literals) and matrices no larger than its largest argument, so its work stays bounded by
    the model's size whatever the source says."""
    def update(*args):
        size = max([len(a) for a in args if np.ndim(a) >= 1] or [1])

        def eye(n):
            if not 0 <= n <= size:
                raise DSLError(f"update: eye({n}) is larger than the model ({size})")
            return np.eye(int(n))

        def outer(a, b):
            if np.size(a) * np.size(b) > size * size:
                raise DSLError(f"update: outer of {np.size(a)} x {np.size(b)} values is larger than the model's square")
            return np.outer(a, b)

        bounded = {**namespace, "_int64": np.int64, "_div": _div, "len": lambda a: np.int64(len(a)), "eye": eye,
                   "outer": outer}
        call = types.FunctionType(fn.__code__, bounded, fn.__name__)
        try:
            with np.errstate(all="ignore"):  # inf and NaN are values here, as in the kernels
                return call(*[np.int64(a) if type(a) is int else a for a in args])
        except LearnedIdxError:
            raise
        except Exception as exc:  # the algorithm's own code failed: its error, not the server's
            raise runtime_error(exc, "update") from None

    return update


def runtime_error(exc: Exception, where: str) -> DSLRuntimeError:
    """The error of an algorithm's code that raised ``exc`` in ``where`` (division by zero and
    overflow keep their SQLSTATEs, 22012 and 22003)."""
    if isinstance(exc, ZeroDivisionError):
        return DSLDivisionByZeroError(f"{where}: division by zero")
    if isinstance(exc, (OverflowError, FloatingPointError)):
        return DSLOverflowError(f"{where}: a value out of range ({exc})")
    return DSLRuntimeError(f"{where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")


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
    split = {f.name: s for f in funcs.values() if f.name != "update" and (s := split_variant(f)) is not None}
    if "update" in funcs:
        funcs["update"] = ast.fix_missing_locations(
            _CheckedDivision().visit(_FixedWidth().visit(copy.deepcopy(funcs["update"]))))
    module = ast.Module(body=list(funcs.values()) + list(split.values()), type_ignores=[])
    ns: dict = {"np": np, "__builtins__": {}, **FUNCTIONS, **UPDATE_FUNCTIONS}
    exec(compile(module, f"<dsl:{name}>", "exec"), ns)  # validated: only arithmetic and whitelisted calls
    for fn in list(funcs) + [s.name for s in split.values()]:
        if fn != "update":  # update runs as Python, once per epoch
            # bounds-checked: x[100000] must raise, not read the server's memory (another
            # call's data) or crash it
            ns[fn] = njit(nogil=True, boundscheck=True)(ns[fn])
    if "update" in funcs:
        ns["update"] = _bounded_update(ns["update"], ns)
    compiled = {k: v for k, v in ns.items() if k in funcs or k.endswith("__split")}
    returns = funcs["update"].body[-1].value if "update" in funcs else None
    return Algorithm(name, source, settings, form, _cost(funcs), compiled, set(split), accs, update_args,
                     symmetric={name for name, fn in split.items() if _symmetric(fn)},
                     update_returns=len(returns.elts) if isinstance(returns, ast.Tuple) else 1)
