"""The import graph: the contracts in pyproject.toml ([tool.importlinter]) hold.

The index imports nothing of accel, server, indb, workloads or bench; accel imports no
server; the top-level subpackages import one another without cycles."""
from __future__ import annotations

import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_import_contracts_hold(capsys):
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert status == 0, out
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in out
