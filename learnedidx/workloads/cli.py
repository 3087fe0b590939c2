"""``learnedidx ycsb ...`` and ``learnedidx trace ...``."""
from __future__ import annotations

import typer

ycsb_app = typer.Typer(help="YCSB load/run against the store and its peers.", no_args_is_help=True)
trace_app = typer.Typer(help="Twitter cache traces: generate and replay.", no_args_is_help=True)
