"""The ``learnedidx`` command line: a thin layer over the library API.

Each concern owns its sub-command group in its own package; this module only
wires them together.
"""
from __future__ import annotations

import typer

from learnedidx.bench.cli import app as bench_app
from learnedidx.indb.cli import app as pg_app
from learnedidx.server.cli import app as server_app
from learnedidx.workloads.cli import store_app, trace_app, ycsb_app

app = typer.Typer(
    help="String-key learned-index KV store, in-database ML for PostgreSQL, and the accelerator server.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(ycsb_app, name="ycsb")
app.add_typer(trace_app, name="trace")
app.add_typer(bench_app, name="bench")
app.add_typer(server_app, name="server")
app.add_typer(pg_app, name="pg")
app.add_typer(store_app, name="store")


@app.command()
def version() -> None:
    """Print the package version."""
    from learnedidx import __version__

    typer.echo(__version__)


def main() -> None:
    """Run the CLI; a typed error of the project is reported as one line (exit 1), not a traceback."""
    from learnedidx.errors import LearnedIdxError

    try:
        app()
    except LearnedIdxError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
