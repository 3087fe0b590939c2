"""``learnedidx pg ...``: install the PostgreSQL extension."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import typer

app = typer.Typer(help="PostgreSQL extension: install and manage.", no_args_is_help=True)

EXTENSION_DIR = Path(__file__).resolve().parents[2] / "extension"


def extension_files() -> list[Path]:
    """The control file and versioned install scripts shipped in ``extension/``."""
    return sorted(p for p in EXTENSION_DIR.glob("*") if p.suffix in (".control", ".sql"))


@app.command()
def install(
    pgconfig: str = typer.Option("pg_config", help="pg_config of the target server"),
) -> None:
    """Copy the extension's control and SQL files into the server's share directory (as PGXS would)."""
    try:
        sharedir = subprocess.run(
            [pgconfig, "--sharedir"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise typer.BadParameter(f"cannot run {pgconfig} --sharedir: {exc}") from exc
    target = Path(sharedir) / "extension"
    files = extension_files()
    for f in files:
        shutil.copy2(f, target / f.name)
        typer.echo(f"installed {target / f.name}")
    if not files:
        typer.echo("no extension files to install")
