"""``learnedidx pg ...``: install the PostgreSQL extension."""
from __future__ import annotations

import typer

from learnedidx.errors import ConfigError

app = typer.Typer(help="PostgreSQL extension: install and manage.", no_args_is_help=True)


@app.command()
def install(
    pgconfig: str = typer.Option("pg_config", help="pg_config of the target server"),
) -> None:
    """Install the extension's control file and SQL scripts into the server's share directory
    (as PGXS's make install would), from this installation of learnedidx."""
    from learnedidx.indb.install import install as install_extension

    try:
        paths = install_extension(pgconfig)
    except (ConfigError, OSError) as exc:
        typer.echo(f"learnedidx pg install: {exc}", err=True)
        raise typer.Exit(1) from None
    for p in paths:
        typer.echo(f"installed {p}")
