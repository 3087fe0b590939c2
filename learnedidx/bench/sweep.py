"""Benchmark: sweep (not implemented yet)."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this benchmark's command to app."""
