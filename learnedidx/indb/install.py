"""The PostgreSQL extension's files as package data, and installing them into a server.

The files live in the repository's ``extension/`` directory, which the wheel ships as the
package ``learnedidx._extension``; they are read through :mod:`importlib.resources`, so an
installed wheel installs the same files as a source checkout.  :func:`install` builds the
extension's C module and installs it with the control file and scripts by running PGXS's
``make install`` in a temporary copy of the package data, as for any contrib module; that
needs ``make``, a C compiler, the server's and libpq's headers (Debian: ``postgresql-server-dev-15``, which
brings ``libpq-dev``).
:func:`installcheck` runs the extension's regression suite (``sql/``, ``expected/``) the same
way, with PGXS's ``make installcheck``.

The copy also holds, in ``python/``, the modules the extension's PL/Python functions import
(:data:`PYTHON_MODULES`, the standard library's only): ``make install`` installs them as a
package of their own under ``SHAREDIR/learnedidx/python``, where the database server's Python
finds them whatever environment this package lives in (docs/indb.md).
"""
from __future__ import annotations

import contextlib
import fnmatch
import shutil
import subprocess
import tempfile
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Iterator

from learnedidx.errors import ConfigError

PACKAGE = "learnedidx._extension"
EXTENSION = "learnedidx"
#: The extension's source files and its regression suite, relative to its directory
#: (pyproject.toml ships the same patterns as package data).
SOURCES = ("*.control", "*.sql", "*.c", "*.h", "Makefile", "sql/*.sql", "expected/*.out")


#: The modules of this package the PL/Python functions import (packages: every module of it).
PYTHON_MODULES = ("learnedidx.errors", "learnedidx.checks", "learnedidx.indb.udf")
#: The ``__init__`` of the packages above them in the installed copy (not this package's own,
#: which imports what the database server's Python need not have).
PYTHON_STUB = ('"""The modules of learnedidx that the PostgreSQL extension\'s PL/Python functions import, '
               'installed with it by learnedidx pg install."""\n')


def package_files() -> Traversable:
    """The extension's directory in the installed package."""
    return resources.files(PACKAGE)


def read_text(name: str) -> str:
    """A file of the extension, e.g. ``read_text("learnedidx--0.1.sql")``."""
    return package_files().joinpath(name).read_text(encoding="utf-8")


def data_files(directory: Traversable | Path | None = None) -> list[str]:
    """Names of the files PGXS installs into ``$sharedir/extension``: the control file
    (``EXTENSION``) and the versioned scripts (``DATA = $(wildcard $(EXTENSION)--*.sql)``)."""
    names = [e.name for e in (directory or package_files()).iterdir() if e.is_file()]
    return [f"{EXTENSION}.control"] + sorted(n for n in names if n.startswith(f"{EXTENSION}--") and n.endswith(".sql"))


@contextlib.contextmanager
def source_tree() -> Iterator[Path]:
    """A temporary copy of the extension's sources (no build products of a checkout): the
    directory ``make install PG_CONFIG=...`` runs in (PGXS writes build products there)."""
    with tempfile.TemporaryDirectory(prefix="learnedidx-extension-") as tmp:
        for pattern in SOURCES:
            folder, _, name = pattern.rpartition("/")
            source = package_files().joinpath(folder) if folder else package_files()
            if not source.is_dir():
                continue
            (Path(tmp) / folder).mkdir(exist_ok=True)
            for entry in source.iterdir():
                if entry.is_file() and fnmatch.fnmatch(entry.name, name):
                    (Path(tmp) / folder / entry.name).write_bytes(entry.read_bytes())
        _copy_python(Path(tmp) / "python")
        yield Path(tmp)


def _copy_python(dst: Path) -> None:
    """:data:`PYTHON_MODULES` into ``dst`` as the package tree they are in, each package above
    them with :data:`PYTHON_STUB` for its ``__init__``."""
    for module in PYTHON_MODULES:
        parent, _, name = module.rpartition(".")
        here = resources.files(parent)
        if here.joinpath(name).is_dir():
            parent, here = module, here.joinpath(name)
            files = [e for e in here.iterdir() if e.is_file() and e.name.endswith(".py")]
        else:
            files = [here.joinpath(name + ".py")]
        folder = dst.joinpath(*parent.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        for entry in files:
            (folder / entry.name).write_bytes(entry.read_bytes())
        for depth in range(1, len(parent.split(".")) + 1):
            init = dst.joinpath(*parent.split(".")[:depth], "__init__.py")
            if not init.exists():
                init.write_text(PYTHON_STUB)


def pg_config(path: str, flag: str) -> str:
    """``pg_config FLAG`` of the target server (ConfigError when it cannot run)."""
    try:
        return subprocess.run([path, flag], check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ConfigError(f"cannot run {path} {flag}: {exc}") from None


def _make(pg_config_path: str, src: Path, target: str, *extra: str) -> subprocess.CompletedProcess:
    """PGXS's ``make target`` in ``src`` for the server of ``pg_config_path``."""
    if shutil.which("make") is None:
        raise ConfigError("building the extension needs make and a C compiler (Debian: make gcc)")
    pgxs = pg_config(pg_config_path, "--pgxs")
    if not Path(pgxs).exists():
        raise ConfigError(f"PGXS ({pgxs}) is missing: install the server's headers (Debian: postgresql-server-dev-15)")
    return subprocess.run(["make", "-C", str(src), target, f"PG_CONFIG={pg_config_path}", *extra],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def make_install(pg_config_path: str, src: Path, *extra: str) -> None:
    """``make install`` in ``src`` for the server of ``pg_config_path`` (no LLVM bitcode: the
    module is small C that JIT inlining has nothing to gain from)."""
    res = _make(pg_config_path, src, "install", "with_llvm=no", *extra)
    if res.returncode != 0:
        raise ConfigError(f"building the extension failed:\n{res.stdout[-3000:]}")


def python_dir(pg_config_path: str = "pg_config") -> Path:
    """Where ``make install`` puts the PL/Python functions' modules (the Makefile's
    PYTHON_DIR; ``learnedidx._python_path()`` in the server)."""
    return Path(pg_config(pg_config_path, "--sharedir")) / EXTENSION / "python"


def install(pg_config_path: str = "pg_config") -> list[Path]:
    """Build and install the extension into the server ``pg_config_path`` describes (its C
    module into ``--pkglibdir``, control file and scripts into ``--sharedir``/extension, the
    PL/Python functions' modules into :func:`python_dir`, as PGXS's ``make install`` does);
    returns the installed paths."""
    target = Path(pg_config(pg_config_path, "--sharedir")) / "extension"
    if not target.is_dir():
        raise ConfigError(f"{target} is not a directory: is {pg_config_path} the pg_config of a PostgreSQL server?")
    with source_tree() as src:
        make_install(pg_config_path, src)
        names = data_files(src)
        modules = sorted(p.relative_to(src / "python") for p in (src / "python").rglob("*.py"))
    return [Path(pg_config(pg_config_path, "--pkglibdir")) / f"{EXTENSION}.so"] + [target / n for n in names] + \
        [python_dir(pg_config_path) / m for m in modules]


def installcheck(pg_config_path: str = "pg_config") -> tuple[bool, str]:
    """Run the extension's regression suite from a copy of the package data: PGXS's ``make
    installcheck`` (pg_regress) against the running server that ``PGHOST``, ``PGPORT`` and
    ``PGUSER`` name (a superuser; the extension installed) and the accelerator server of
    ``$LEARNEDIDX_SOCKET`` (else its default path).  Returns whether every script passed, and
    pg_regress's report followed, on a failure, by its ``regression.diffs``."""
    with source_tree() as src:
        res = _make(pg_config_path, src, "installcheck")
        diffs = src / "regression.diffs"
        report = res.stdout + (diffs.read_text() if res.returncode != 0 and diffs.exists() else "")
    return res.returncode == 0, report
