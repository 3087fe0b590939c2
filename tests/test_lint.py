"""The package and its tests pass ruff with the rules pyproject.toml selects ([tool.ruff]):
no unused imports or variables, no undefined names, ... (CI runs this test)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "All checks passed!" in res.stdout


def test_ruff_checks_the_package_and_the_tests():
    """The selection is the one configured, over every file of the package and the tests but
    the directories pyproject.toml excludes."""
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--show-files", "."],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    files = {Path(line).resolve() for line in res.stdout.splitlines() if line.endswith(".py")}
    assert Path(__file__).resolve() in files and (REPO / "learnedidx" / "checks.py") in files
    assert not {f for f in files if f.is_relative_to(REPO / "learnedidx" / "index")}  # excluded for now
