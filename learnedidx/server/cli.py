"""``learnedidx server start|stop|status``."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from learnedidx.server.protocol import default_socket_path

app = typer.Typer(help="The accelerator server (emulated FPGA offload).", no_args_is_help=True)


def _pidfile(socket_path: str) -> Path:
    return Path(socket_path + ".pid")


@app.command()
def start(
    socket: str = typer.Option(default_socket_path(), "--socket", help="Unix socket path (mode 0600)"),
    backend: str = typer.Option("cpu", "--backend", help="cpu or fpga-emu"),
    config: Optional[str] = typer.Option(None, "--config", help="device parameters (TOML/JSON)"),
    tcp: Optional[str] = typer.Option(None, "--tcp", help="also listen on 127.0.0.1:PORT (needs --token-file)"),
    token_file: Optional[str] = typer.Option(None, "--token-file"),
    pg_conninfo: Optional[str] = typer.Option(None, "--pg-conninfo", help="PostgreSQL for indb.* requests"),
    device_set: Optional[list[str]] = typer.Option(None, "--set", help="device parameter NAME=VALUE (repeatable), over --config"),
    daemon: bool = typer.Option(False, "--daemon", help="run in the background"),
) -> None:
    """Start the server (foreground unless --daemon)."""
    from learnedidx.accel.config import DeviceConfig
    from learnedidx.server.main import serve

    from learnedidx.errors import ConfigError

    try:  # fail here, not in the daemon
        DeviceConfig.load(config, **DeviceConfig.parse_settings(device_set or []))
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if not daemon:
        serve(socket, backend, config, tcp, token_file, pg_conninfo, str(_pidfile(socket)), device_set)
        return
    args = [sys.executable, "-m", "learnedidx.server.main", "--socket", socket, "--backend", backend,
            "--pidfile", str(_pidfile(socket))]
    for flag, val in (("--config", config), ("--tcp", tcp), ("--token-file", token_file), ("--pg-conninfo", pg_conninfo)):
        if val:
            args += [flag, val]
    for item in device_set or []:
        args += ["--set", item]
    log = Path(socket + ".log")
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    from learnedidx.server.process import wait_ready

    info = wait_ready(socket, 60, proc)
    typer.echo(f"server pid {info['pid']} listening on {socket} (log {log})")


@app.command()
def stop(socket: str = typer.Option(default_socket_path(), "--socket")) -> None:
    """Stop the server listening on --socket (SIGTERM, then wait)."""
    pf = _pidfile(socket)
    if not pf.exists():
        typer.echo(f"no server pidfile at {pf}", err=True)
        raise typer.Exit(1)
    pid = int(pf.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pf.unlink(missing_ok=True)
        typer.echo("server was not running")
        return
    for _ in range(100):  # the server removes its socket, then its pidfile, on the way out
        if not Path(socket).exists() and not pf.exists():
            typer.echo(f"stopped server pid {pid}")
            return
        time.sleep(0.1)
    typer.echo(f"server pid {pid} has not exited after 10 s", err=True)
    raise typer.Exit(1)


@app.command()
def status(socket: str = typer.Option(default_socket_path(), "--socket")) -> None:
    """Health and statistics of the running server."""
    from learnedidx.errors import ServerUnavailableError
    from learnedidx.server.client import Client

    try:
        with Client(socket, timeout=5) as c:
            typer.echo(json.dumps({"health": c.call("health")[0], "stats": c.call("stats")[0]}, indent=2))
    except ServerUnavailableError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1)
