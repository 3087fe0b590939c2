"""Entry point of the server process: ``python -m learnedidx.server.main``."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from learnedidx.server.protocol import default_socket_path


def serve(socket_path: str, backend: str = "cpu", device_config: Optional[str] = None, tcp: Optional[str] = None,
          token_file: Optional[str] = None, pg_conninfo: Optional[str] = None, pidfile: Optional[str] = None,
          device_set: Optional[list[str]] = None) -> None:
    from learnedidx.accel.config import DeviceConfig
    from learnedidx.server.server import Server, ServerConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s learnedidx-server %(levelname)s %(message)s")
    tcp_addr = None
    if tcp:
        host, _, port = tcp.rpartition(":")
        tcp_addr = (host or "127.0.0.1", int(port))
    token = Path(token_file).read_text().strip() if token_file else None
    cfg = ServerConfig(socket_path=socket_path, tcp=tcp_addr, token=token, backend=backend,
                       device_config=device_config, device_settings=DeviceConfig.parse_settings(device_set or []),
                       pg_conninfo=pg_conninfo or os.environ.get("LEARNEDIDX_PG_CONNINFO"))
    server = Server(cfg)
    server.bind()
    server.install_signal_handlers()
    if pidfile:
        Path(pidfile).write_text(str(os.getpid()))
    logging.info("listening on %s (backend %s)", socket_path, backend)
    try:
        server.serve_forever()
    finally:
        if pidfile:
            Path(pidfile).unlink(missing_ok=True)


def main(
    socket: str = typer.Option(default_socket_path(), "--socket"),
    backend: str = typer.Option("cpu", "--backend"),
    config: Optional[str] = typer.Option(None, "--config"),
    tcp: Optional[str] = typer.Option(None, "--tcp"),
    token_file: Optional[str] = typer.Option(None, "--token-file"),
    pg_conninfo: Optional[str] = typer.Option(None, "--pg-conninfo"),
    pidfile: Optional[str] = typer.Option(None, "--pidfile"),
    device_set: Optional[list[str]] = typer.Option(None, "--set"),
) -> None:
    serve(socket, backend, config, tcp, token_file, pg_conninfo, pidfile, device_set)


if __name__ == "__main__":
    typer.run(main)
    sys.exit(0)
