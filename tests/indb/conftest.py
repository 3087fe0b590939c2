"""A real PostgreSQL cluster with the extension, and a real accelerator server beside it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import psycopg
import pytest

from learnedidx.server.process import spawn
from tests.pgfixtures import PG_BINDIR

#: MADlib 2.1's install prefix (built as docs/indb.md says, "MADlib 2.1 as the peer"): the tests
#: that compare with MADlib itself run only when it is given
MADLIB_PREFIX = os.environ.get("LEARNEDIDX_MADLIB_PREFIX")


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


def own_database(proc, name: str) -> psycopg.Connection:
    """A fresh database ``name`` of the test cluster ``proc``: an autocommit connection to it as
    the cluster's user."""
    with psycopg.connect(host=proc.host, port=proc.port, user=proc.user, dbname="postgres", autocommit=True) as su:
        su.execute(f"DROP DATABASE IF EXISTS {name}")
        su.execute(f"CREATE DATABASE {name}")
    return psycopg.connect(host=proc.host, port=proc.port, user=proc.user, dbname=name, autocommit=True)


def install_madlib(conn: psycopg.Connection, proc) -> None:
    """MADlib (at MADLIB_PREFIX) installed into ``conn``'s database of the test cluster ``proc``
    by its madpack, as the cluster's user, through the PG* variables (its -c cannot name a socket
    directory)."""
    # madpack runs the system's python3 (it needs PyYAML: Debian's python3-yaml), not this
    # virtualenv's, and the cluster's pg_ctl
    venv = os.path.realpath(os.path.dirname(sys.executable))
    path = os.pathsep.join([PG_BINDIR] + [p for p in os.environ["PATH"].split(os.pathsep)
                                          if os.path.realpath(p) != venv])
    env = {**os.environ, "PATH": path, "PGHOST": proc.host, "PGPORT": str(proc.port), "PGUSER": proc.user,
           "PGDATABASE": conn.info.dbname}
    try:
        done = subprocess.run([os.path.join(MADLIB_PREFIX, "bin", "madpack"), "-p", "postgres", "install"], env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:  # every madpack run rewrites dynamic_library_path, dropping $libdir (docs/indb.md)
        conn.execute(f"ALTER SYSTEM SET dynamic_library_path = '$libdir:{MADLIB_PREFIX}/Current/ports/postgres/15/lib'")
        conn.execute("SELECT pg_reload_conf()")
