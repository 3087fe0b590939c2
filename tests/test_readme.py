"""The README's command table names every command of the command line, and only those."""
from __future__ import annotations

import re
from pathlib import Path

import typer.main

from learnedidx.cli import app

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _leaves(cmd, path: str) -> set[str]:
    """Every command below ``cmd`` (a click group or command), by its full name."""
    if hasattr(cmd, "commands"):
        return {c for name, sub in cmd.commands.items() for c in _leaves(sub, f"{path} {name}")}
    return {path}


def test_the_readme_names_every_command():
    every = _leaves(typer.main.get_command(app), "learnedidx")
    named = set()
    last: list[str] = []  # the command a bare `sub` command after it belongs beside
    for row in README.splitlines():
        if not row.startswith("| `learnedidx "):
            continue
        first = row.split(" | ")[0]
        for span in re.findall(r"`([^`]+)`", first):
            words = span.split()
            if words[0] != "learnedidx":  # `stop`, `status` after `learnedidx server start`
                words = last[:-1] + words[:1]
            prefixes = [" ".join(words[:i]) for i in range(len(words), 0, -1)]
            found = next((p for p in prefixes if p in every), None)
            assert found, span
            named.add(found)
            last = found.split()
    assert named == every
