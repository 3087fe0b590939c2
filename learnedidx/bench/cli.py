"""``learnedidx bench ...``: benchmarks that print ratios against peers measured in the same run.

Each benchmark module exposes ``register(app)``, adding its command(s).
"""
from __future__ import annotations

import typer

from learnedidx.bench import checkpoint, compare, indb, load, offload, ops, retrain, sweep

app = typer.Typer(help="Benchmarks (ratios against peers measured in the same run).", no_args_is_help=True)
for _module in (retrain, ops, load, checkpoint, compare, offload, sweep, indb):
    _module.register(app)
