"""The in-database package's dependencies point one way: dsl (the compiler) <- runtime (the
engine and algorithms); read (the readers) on its own; the server's handlers use both and
nothing in learnedidx.indb imports the server."""
from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import learnedidx

ROOT = Path(learnedidx.__file__).resolve().parent
INDB = "learnedidx.indb"


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "indb").rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module ``name`` imports, at any depth of its code (lazy imports included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_import_cycles_in_indb():
    graph = {m: {i for i in deps if _under(i, INDB) and i != m} for m, deps in _graph().items()}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the cycle


def test_dependencies_point_one_way():
    forbidden = {  # importer package -> packages it must not import
        f"{INDB}.dsl": [f"{INDB}.runtime", f"{INDB}.read", "learnedidx.server"],
        f"{INDB}.read": [f"{INDB}.dsl", f"{INDB}.runtime", "learnedidx.server"],
        f"{INDB}.runtime": [f"{INDB}.read", "learnedidx.server"],
        INDB: ["learnedidx.server"],
    }
    wrong = [(m, i) for m, deps in _graph().items() for pkg, bad in forbidden.items() if _under(m, pkg)
             for i in deps for b in bad if _under(i, b)]
    assert wrong == []


def test_the_builtin_algorithm_names_are_listed_once():
    """One list of the built-in algorithms (learnedidx.indb.udf.catalog), which the server and
    the SQL functions share: no other tuple, list or set of their names in the package, and
    none in the extension's SQL script."""
    names = {"linregr", "logregr", "svm", "lmf"}
    homes = [path.relative_to(ROOT.parent).as_posix() for path in ROOT.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, (ast.Tuple, ast.List, ast.Set))
             and len(names & {e.value for e in node.elts if isinstance(e, ast.Constant)}) > 1]
    assert homes == ["learnedidx/indb/udf/catalog.py"] * 3  # BUILTINS, GROUPABLE, SHARDED
    script = (ROOT.parent / "extension" / "learnedidx--0.1.sql").read_text()
    assert not re.search(r"'(linregr|logregr|svm|lmf)'\s*,\s*'(linregr|logregr|svm|lmf)'", script)
