"""``learnedidx server start|stop|status``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from learnedidx.server.protocol import default_socket_path

app = typer.Typer(help="The accelerator server (emulated FPGA offload).", no_args_is_help=True)


def _pidfile(socket_path: str) -> Path:
    return Path(socket_path + ".pid")


@app.command()
def start(
    ctx: typer.Context,
    socket: str = typer.Option(default_socket_path(), "--socket", help="Unix socket path (mode 0600)"),
    backend: str = typer.Option("cpu", "--backend", help="cpu or fpga-emu"),
    config: Optional[str] = typer.Option(None, "--config", help="device parameters (TOML/JSON)"),
    device_set: Optional[list[str]] = typer.Option(None, "--set", help="device parameter NAME=VALUE (repeatable), over --config"),
    tcp: Optional[str] = typer.Option(None, "--tcp", help="also listen on 127.0.0.1:PORT (needs --token-file)"),
    token_file: Optional[str] = typer.Option(None, "--token-file"),
    max_threads: Optional[int] = typer.Option(None, "--max-threads", help="engine threads per indb call [default: the cores]"),
    max_features: Optional[int] = typer.Option(None, "--max-features", help="features per model [default: 1024]"),
    max_call_memory: Optional[int] = typer.Option(None, "--max-call-memory",
                                                  help="bytes of training data per indb call [default: a quarter of RAM]"),
    max_calls: Optional[int] = typer.Option(None, "--max-calls", help="indb calls computing at once [default: the cores, at least 2]"),
    pidfile: Optional[str] = typer.Option(None, "--pidfile", help="where the server writes its pid, locked while it runs [default: <socket>.pid]"),
    daemon: bool = typer.Option(False, "--daemon", help="run in the background"),
) -> None:
    """Start the server (foreground unless --daemon).  Its socket, pidfile and log must be in
    directories of this OS user that nobody else can write (docs/accelerator.md)."""
    from learnedidx.accel.config import DeviceConfig
    from learnedidx.errors import ConfigError, LearnedIdxError
    from learnedidx.server.server import Limits, ServerConfig, serve

    pidfile = pidfile or str(_pidfile(socket))
    try:  # fail here, not in the daemon
        settings = DeviceConfig.parse_settings(device_set or [])
        DeviceConfig.load(config, **settings)
        cfg = ServerConfig(socket_path=socket, tcp=_tcp_address(tcp) if tcp else None,
                           token=Path(token_file).read_text().strip() if token_file else None,
                           backend=backend, device_config=config, device_settings=settings,
                           limits=Limits(**{k: v for k, v in (("max_threads", max_threads), ("max_features", max_features),
                                                              ("max_call_bytes", max_call_memory),
                                                              ("max_calls", max_calls)) if v is not None}))
    except (ConfigError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    try:
        if daemon:
            _daemon(ctx, socket, pidfile)
        else:
            serve(cfg, pidfile)  # returns only when it refuses to start
    except (LearnedIdxError, OSError) as exc:  # refused (UnsafePathError, ServerRunningError) or failed
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)


def _daemon(ctx: typer.Context, socket: str, pidfile: str) -> None:
    """Run this command in the foreground of a new session, logging to ``<socket>.log``, and
    return once it serves with its kernels compiled."""
    from learnedidx.errors import ServerUnavailableError
    from learnedidx.server import runfiles
    from learnedidx.server.process import wait_ready

    runfiles.check_start(socket, pidfile)
    log = socket + ".log"
    log_fd = runfiles.open_log(log)
    # -P: the current directory must not shadow the installed package (a clone named learnedidx).
    args = [sys.executable, "-P", "-m", "learnedidx.server.main", *_options(ctx, skip={"daemon", "pidfile"}),
            "--pidfile", pidfile]
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        os.close(log_fd)
    try:
        info = wait_ready(socket, 120, proc, warm=True)  # started = ready to serve without compiling
    except ServerUnavailableError as exc:
        raise ServerUnavailableError(f"{exc} (its log: {log})") from None
    typer.echo(f"server pid {info['pid']} listening on {socket} (log {log})")


def _tcp_address(tcp: str) -> tuple[str, int]:
    """``PORT``, ``:PORT`` or ``HOST:PORT`` (host 127.0.0.1 when omitted)."""
    from learnedidx.errors import ConfigError

    host, _, port = tcp.rpartition(":")
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        raise ConfigError(f"--tcp needs PORT or HOST:PORT, not {tcp!r}") from None


def _options(ctx: typer.Context, skip: set[str]) -> list[str]:
    """The command line of ``ctx``'s command for the options it was given (not ``skip``)."""
    out: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if param.name in skip or value is None or value is False or value == ():
            continue
        for item in value if param.multiple else [value]:
            out += [param.opts[0]] if item is True else [param.opts[0], str(item)]
    return out


@app.command()
def stop(
    socket: str = typer.Option(default_socket_path(), "--socket"),
    pidfile: Optional[str] = typer.Option(None, "--pidfile", help="the --pidfile the server was started with "
                                                                  "[default: <socket>.pid]"),
) -> None:
    """Stop the server holding the pidfile (SIGTERM, then wait up to 10 s for it to exit)."""
    from learnedidx.errors import NoPidfileError, ServerRunningError, UnsafePathError
    from learnedidx.server import runfiles

    pidfile = pidfile or str(_pidfile(socket))
    try:
        pid = runfiles.stop(pidfile, timeout=10)
    except (NoPidfileError, UnsafePathError, ServerRunningError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)
    if pid is None:
        typer.echo(f"server was not running (no process holds {pidfile}; nothing was signalled)")
    else:
        typer.echo(f"stopped server pid {pid}")


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
