"""``learnedidx pg ...``: install the PostgreSQL extension, run its regression suite."""
from __future__ import annotations

import typer

from learnedidx.errors import ConfigError

app = typer.Typer(help="PostgreSQL extension: install and manage.", no_args_is_help=True)


@app.command()
def install(
    pgconfig: str = typer.Option("pg_config", help="pg_config of the target server"),
) -> None:
    """Build the extension's C module and install it with the control file and SQL scripts
    (PGXS's make install on a copy of this installation's package data; needs make, a C
    compiler and the server's headers)."""
    from learnedidx.indb.install import install as install_extension

    try:
        paths = install_extension(pgconfig)
    except (ConfigError, OSError) as exc:
        typer.echo(f"learnedidx pg install: {exc}", err=True)
        raise typer.Exit(1) from None
    for p in paths:
        typer.echo(f"installed {p}")


@app.command()
def installcheck(
    pgconfig: str = typer.Option("pg_config", help="pg_config of the server the suite runs against"),
) -> None:
    """Run the extension's regression suite (PGXS's make installcheck on a copy of this
    installation's package data) against the running server PGHOST, PGPORT and PGUSER name
    (a superuser; the extension installed) and the accelerator server of $LEARNEDIDX_SOCKET."""
    from learnedidx.indb.install import installcheck as run_suite

    try:
        passed, report = run_suite(pgconfig)
    except (ConfigError, OSError) as exc:
        typer.echo(f"learnedidx pg installcheck: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(report, nl=False)
    if not passed:
        raise typer.Exit(1)
