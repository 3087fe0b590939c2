"""The deployment docs/indb.md documents, end to end on a fresh cluster: the server started as
the docs say, the extension created, learnedidx.socket set for every session the documented
way, and an unprivileged role training and predicting in sessions that set nothing."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import psycopg
import pytest

from learnedidx.indb.cluster import TempCluster
from tests.indb.conftest import load
from tests.pgfixtures import PG_BINDIR

pytestmark = pytest.mark.postgres

CLI = [sys.executable, "-P", "-m", "learnedidx.cli"]


def test_the_documented_deployment(tmp_path, postgresql_proc):
    sock = str(tmp_path / "run" / "accel.sock")
    subprocess.run(CLI + ["server", "start", "--socket", sock, "--daemon"], check=True, capture_output=True,
                   timeout=120)
    try:
        with TempCluster(PG_BINDIR, settings={"shared_buffers": "32MB", "max_wal_size": "64MB"}) as cluster:
            info = cluster.conninfo
            with psycopg.connect(info, autocommit=True) as su:
                su.execute("CREATE EXTENSION learnedidx CASCADE")
                su.execute("CREATE ROLE analyst LOGIN")
                su.execute("GRANT CREATE ON SCHEMA public TO analyst")
                X = np.random.default_rng(0).normal(size=(200, 3))
                load(su, "sales", X, X @ [1.0, 2.0, 3.0] + 4.0)
                su.execute("GRANT SELECT ON sales TO analyst")
            # PostgreSQL 15 knows learnedidx.socket once the module is loaded in the session: a
            # fresh session's ALTER SYSTEM fails without the LOAD the docs put before it
            with psycopg.connect(info, autocommit=True) as su:
                with pytest.raises(psycopg.errors.UndefinedObject, match="learnedidx.socket"):
                    su.execute(f"ALTER SYSTEM SET learnedidx.socket = '{sock}'")
            with psycopg.connect(info, autocommit=True) as su:  # the documented steps
                su.execute("LOAD 'learnedidx'")
                su.execute(f"ALTER SYSTEM SET learnedidx.socket = '{sock}'")
                su.execute("SELECT pg_reload_conf()")
            with psycopg.connect(info.replace("user=postgres", "user=analyst"), autocommit=True) as a:
                coef = a.execute("SELECT coef FROM learnedidx.linregr_train('sales', 'sales_m', 'y', 'features')"
                                 ).fetchone()[0]
                np.testing.assert_allclose(coef, [4.0, 1.0, 2.0, 3.0], atol=1e-9)
                assert a.execute("SELECT learnedidx.predict('sales_m', '{1, 1, 1}')").fetchone()[0] == \
                    pytest.approx(10.0)
                assert a.execute("SELECT current_setting('learnedidx.socket')").fetchone() == (sock,)
    finally:
        subprocess.run(CLI + ["server", "stop", "--socket", sock], capture_output=True, timeout=60)


def test_only_superusers_say_where_the_server_is_even_before_the_module_loads(db, accel_server, tmp_path):
    """A role that sets learnedidx.socket in a fresh session, before the module is loaded (a
    placeholder then), or for itself with ALTER ROLE, cannot point its backend at a socket of
    its choosing: PostgreSQL drops the placeholder's value when the module defines the setting."""
    from tests.indb.conftest import connect, make_role

    make_role(db, "mallory")
    db.execute("GRANT CREATE ON SCHEMA public TO mallory")
    db.execute("CREATE TABLE pub (y float8, x float8)")
    db.execute("INSERT INTO pub VALUES (1, 1), (2, 2), (3, 4)")
    db.execute("GRANT SELECT ON pub TO mallory")
    evil = str(tmp_path / "evil.sock")
    with connect(db, "mallory") as m:
        m.execute(f"SET learnedidx.socket = '{evil}'")  # accepted as a placeholder ...
        assert m.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('pub', 'm1', 'y', 'x')"
                         ).fetchone() == (3,)  # ... and dropped when the module loads
        assert m.execute("SELECT current_setting('learnedidx.socket')").fetchone() == (accel_server.socket_path,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            m.execute(f"SET learnedidx.socket = '{evil}'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            m.execute(f"ALTER ROLE mallory SET learnedidx.socket = '{evil}'")
    with connect(db, "mallory", options=f"-c learnedidx.socket={evil}") as m:  # in the startup packet
        # dropped too (with the database's setting it overrode: the default path is left)
        m.execute("SELECT learnedidx.linregr_predict('{1}', '{1}')")  # loads the module
        assert m.execute("SELECT current_setting('learnedidx.socket') <> %s", (evil,)).fetchone() == (True,)
