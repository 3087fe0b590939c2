"""Installation smoke tests: the CLI runs and the PostgreSQL fixture provides what the extension needs."""
from __future__ import annotations

import subprocess
import sys

import pytest

import learnedidx


def test_cli_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "learnedidx.cli", "version"], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == learnedidx.__version__


@pytest.mark.postgres
def test_cluster_has_plpython_and_pageinspect(postgresql) -> None:
    rows = postgresql.execute(
        "SELECT name FROM pg_available_extensions WHERE name IN ('plpython3u', 'pageinspect') ORDER BY name"
    ).fetchall()
    assert [r[0] for r in rows] == ["pageinspect", "plpython3u"]


def test_cli_reports_a_typed_error_as_one_line(tmp_path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("a\nb\nc\n")
    r = subprocess.run(
        [sys.executable, "-m", "learnedidx.cli", "ycsb", "run", "--peer", "dict", "--keys", str(keys),
         "--records", "100", "--operations", "10"],
        capture_output=True, text=True,
    )
    assert r.returncode == 1
    assert r.stderr.strip() == "error: the key file has 3 keys; the workload needs more"
    assert "Traceback" not in r.stderr + r.stdout
