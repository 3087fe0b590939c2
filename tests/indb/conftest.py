"""A real PostgreSQL cluster with the extension, and a real accelerator server beside it."""
from __future__ import annotations

import pytest

from learnedidx.server.process import spawn


@pytest.fixture(scope="session")
def accel_server(tmp_path_factory, postgresql_proc):
    sock = str(tmp_path_factory.mktemp("srv") / "accel.sock")
    proc = spawn(sock, backend="cpu", extra_args=["--pg-conninfo", f"user={postgresql_proc.user}"])
    yield proc
    proc.stop()


@pytest.fixture
def db(postgresql, accel_server):
    """An autocommit connection with the extension created and the server's socket configured."""
    postgresql.autocommit = True
    postgresql.execute("CREATE EXTENSION IF NOT EXISTS learnedidx CASCADE")
    postgresql.execute("SELECT set_config('learnedidx.socket', %s, false)", (accel_server.socket_path,))
    dbname = postgresql.info.dbname
    postgresql.execute(f'ALTER DATABASE "{dbname}" SET learnedidx.socket = \'{accel_server.socket_path}\'')
    return postgresql
