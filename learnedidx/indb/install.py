"""The PostgreSQL extension's files as package data, and installing them into a server.

The files live in the repository's ``extension/`` directory, which the wheel ships as the
package ``learnedidx._extension``; they are read through :mod:`importlib.resources`, so an
installed wheel installs the same files as a source checkout.  :func:`install` does what
PGXS's ``make install`` does for the extension's ``EXTENSION`` and ``DATA`` (see
``extension/Makefile``), from a temporary copy of the package data on disk, where a PGXS
build can run once the extension has C code.
"""
from __future__ import annotations

import contextlib
import os
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
    """A temporary copy of the package data (control file, scripts, Makefile) on disk: the
    directory ``make install PG_CONFIG=...`` runs in (PGXS writes build products there)."""
    with tempfile.TemporaryDirectory(prefix="learnedidx-extension-") as tmp:
        for entry in package_files().iterdir():
            if entry.is_file() and not entry.name.endswith((".py", ".pyc")):
                (Path(tmp) / entry.name).write_bytes(entry.read_bytes())
        yield Path(tmp)


def pg_config(path: str, flag: str) -> str:
    """``pg_config FLAG`` of the target server (ConfigError when it cannot run)."""
    try:
        return subprocess.run([path, flag], check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ConfigError(f"cannot run {path} {flag}: {exc}") from None


def install(pg_config_path: str = "pg_config") -> list[Path]:
    """Install the extension into the server ``pg_config_path`` describes, as PGXS would
    (mode 0644 in ``$(pg_config --sharedir)/extension``); returns the installed paths."""
    target = Path(pg_config(pg_config_path, "--sharedir")) / "extension"
    if not target.is_dir():
        raise ConfigError(f"{target} is not a directory: is {pg_config_path} the pg_config of a PostgreSQL server?")
    installed = []
    with source_tree() as src:
        for name in data_files(src):
            shutil.copyfile(src / name, target / name)
            os.chmod(target / name, 0o644)
            installed.append(target / name)
    return installed
