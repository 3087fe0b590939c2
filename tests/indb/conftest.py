"""A real PostgreSQL cluster with the extension, and a real accelerator server beside it."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import psycopg
import pytest

from learnedidx.server.process import spawn


@pytest.fixture(scope="session")
def accel_server(tmp_path_factory, postgresql_proc):
    sock = str(tmp_path_factory.mktemp("srv") / "accel.sock")
    proc = spawn(sock, backend="cpu", warm=True)
    yield proc
    proc.stop()


@pytest.fixture
def db(postgresql, accel_server):
    """An autocommit connection (the cluster's superuser) with the extension created and the
    server's socket configured for the database."""
    postgresql.autocommit = True
    postgresql.execute("CREATE EXTENSION IF NOT EXISTS learnedidx CASCADE")
    postgresql.execute("SELECT set_config('learnedidx.socket', %s, false)", (accel_server.socket_path,))
    dbname = postgresql.info.dbname
    postgresql.execute(f'ALTER DATABASE "{dbname}" SET learnedidx.socket = \'{accel_server.socket_path}\'')
    return postgresql


def connect(db: psycopg.Connection, user: str | None = None, **kw) -> psycopg.Connection:
    """Another session of ``db``'s database (as ``user``, the cluster trusting local logins)."""
    i = db.info
    return psycopg.connect(**{"host": i.host, "port": i.port, "user": user or i.user, "dbname": i.dbname,
                              "autocommit": True, **kw})


def make_role(db: psycopg.Connection, name: str, *options: str) -> str:
    """A fresh login role (roles outlive the test's database)."""
    db.execute(f'DROP ROLE IF EXISTS "{name}"')
    db.execute(f'CREATE ROLE "{name}" LOGIN {" ".join(options)}')
    return name


def load(conn: psycopg.Connection, table: str, X: np.ndarray, y: np.ndarray, array: bool = True) -> None:
    """``table`` (id serial, y, features float8[]) or (id serial, y, x0, x1, ...) holding X, y."""
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    if array:
        conn.execute(f"CREATE TABLE {table} (id serial, y float8, features float8[])")
        with conn.cursor().copy(f"COPY {table} (y, features) FROM STDIN") as cp:
            for xi, yi in zip(X, y):
                cp.write_row((float(yi), [float(v) for v in xi]))
    else:
        cols = ", ".join(f"x{i} float8" for i in range(X.shape[1]))
        conn.execute(f"CREATE TABLE {table} (id serial, y float8, {cols})")
        names = ", ".join(f"x{i}" for i in range(X.shape[1]))
        with conn.cursor().copy(f"COPY {table} (y, {names}) FROM STDIN") as cp:
            for xi, yi in zip(X, y):
                cp.write_row((float(yi), *map(float, xi)))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))
