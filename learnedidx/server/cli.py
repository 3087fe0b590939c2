"""``learnedidx server ...``: start/stop the accelerator server."""
from __future__ import annotations

import typer

app = typer.Typer(help="The accelerator server (emulated FPGA offload).", no_args_is_help=True)
