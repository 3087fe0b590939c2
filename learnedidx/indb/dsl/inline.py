"""Per-tuple functions as straight-line code inside a kernel, each call computed once.

A kernel that calls ``acc_grad``, ``acc_hess`` and ``loss`` per tuple as compiled functions
pays for three calls (arrays passed and returned by reference) and computes what they share
three times: logistic regression's ``dot(w, x)`` and ``sigmoid``.  :class:`Inliner` writes the
functions' bodies into the kernel instead, their locals renamed (DSL names never start with
``_``), and gives every call of a DSL function one temporary: a call it has computed already,
with the same arguments, is reused.  That is sound because the DSL's code is pure (arithmetic
and whitelisted functions, no assignment but to locals); calls inside ``a if c else b`` and
``and``/``or`` stay where they are, so nothing is computed that the function would not compute.
"""
from __future__ import annotations

import ast

from learnedidx.indb.dsl.compiler import split_variant


class _Rename(ast.NodeTransformer):
    """Names to the kernel's variables; calls outside conditionals to temporaries."""

    def __init__(self, inliner: "Inliner", names: dict[str, str]) -> None:
        self.inliner, self.names = inliner, names
        self.conditional = 0

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(self.names.get(node.id, node.id), ast.Load()), node)

    def _opaque(self, node: ast.AST) -> ast.AST:
        self.conditional += 1
        try:
            return self.generic_visit(node)
        finally:
            self.conditional -= 1

    visit_IfExp = visit_BoolOp = _opaque

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)
        return node if self.conditional else ast.Name(self.inliner.value(node), ast.Load())


class Inliner:
    """Lines of kernel code computing per-tuple functions of one algorithm's source."""

    def __init__(self, source: str) -> None:
        self.functions = {f.name: f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)}
        self.lines: list[str] = []
        self._values: dict[str, str] = {}  # expression text -> the temporary holding it

    def value(self, expr: ast.AST) -> str:
        """A temporary holding ``expr`` (the one already holding it, if any)."""
        text = ast.unparse(expr)
        if text not in self._values:
            self._values[text] = f"_t{len(self._values)}"
            self.lines.append(f"{self._values[text]} = {text}")
        return self._values[text]

    def call(self, name: str, args: list[str]) -> list[str]:
        """``name(*args)`` (``args``: the kernel's variable names; a name ending in ``__split``
        is that function's split variant): the variables holding its results.  A function
        whose body is more than assignments to names is called, not inlined."""
        split = name.endswith("__split")
        fn = self.functions[name.removesuffix("__split")]
        if split:
            fn = split_variant(fn)
        results = len(fn.body[-1].value.elts) if split else 1
        if not all(isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) for s in fn.body[:-1]):
            line = f"{name}({', '.join(args)})"
            if line not in self._values:
                names = [f"_t{len(self._values)}_{k}" for k in range(results)]
                self._values[line] = ", ".join(names)
                self.lines.append(f"{self._values[line]} = {line}")
            return self._values[line].split(", ")
        names = dict(zip([a.arg for a in fn.args.args], args))
        for stmt in fn.body[:-1]:
            value = _Rename(self, names).visit(stmt.value)
            names[stmt.targets[0].id] = value.id if isinstance(value, ast.Name) else self.value(value)
        ret = _Rename(self, names).visit(fn.body[-1].value)
        return [p.id if isinstance(p, ast.Name) else self.value(p) for p in (ret.elts if split else [ret])]
