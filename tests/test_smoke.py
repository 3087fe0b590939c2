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
