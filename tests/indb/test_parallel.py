"""The page path read by PostgreSQL parallel workers (extension/parallel.c, docs/indb.md
"Parallel reading"): the same models as the serial path, in the caller's snapshot, with the
caller's privileges; PostgreSQL's settings decide the workers; a cancel leaves none running.

The oracle is a plain SELECT of the same rows (numpy's least squares on them) and the serial
path (``learnedidx.parallel_workers = 0``); ``timings.workers`` in the summary says how many
workers read the pages (0: the caller's backend did).
"""
from __future__ import annotations

import json
import socket
import threading

import numpy as np
import psycopg
import pytest

from tests.indb.conftest import connect, load, make_role

pytestmark = pytest.mark.postgres

ROWS = 40_000


@pytest.fixture
def pdb(db):
    """``db`` with ``big`` (ROWS rows, 10 features, a 0/1 label ``c``), about 700 pages."""
    X = np.random.default_rng(43).normal(size=(ROWS, 10))
    load(db, "big", X, X @ np.arange(1.0, 11.0) + 5.0 + np.random.default_rng(44).normal(size=ROWS))
    db.execute("ALTER TABLE big ADD COLUMN c float8")
    db.execute("UPDATE big SET c = (features[1] + features[2] > 0)::int")
    db.execute("VACUUM ANALYZE big")
    return db


def _train(conn, call: str, out: str, workers: int | None) -> tuple[np.ndarray, dict]:
    """coef and the summary's timings of one call, with ``learnedidx.parallel_workers`` set."""
    if workers is not None:
        conn.execute(f"SET learnedidx.parallel_workers = {workers}")
    coef = conn.execute(f"SELECT coef FROM learnedidx.{call.format(out=out)}").fetchone()[0]
    timings, path = conn.execute(f"SELECT timings, read_path FROM {out}_summary").fetchone()
    timings = json.loads(timings) if isinstance(timings, str) else timings
    return np.array(coef, float), {**timings, "path": path}


def _lstsq(conn, where: str = "") -> np.ndarray:
    rows = conn.execute(f"SELECT y, features FROM big {where}").fetchall()
    y = np.array([r[0] for r in rows])
    X = np.c_[np.ones(len(rows)), np.array([r[1] for r in rows])]
    return np.linalg.lstsq(X, y, rcond=None)[0]


LINREGR = "linregr_train('big', '{out}', 'y', 'features')"
IRLS = "logregr_train('big', '{out}', 'c', 'features', NULL, 20, 'irls', 1e-10)"
CG = "logregr_train('big', '{out}', 'c', 'features', NULL, 8, 'cg', 0)"
ONE = "logregr_train('big', '{out}', 'c', 'features', NULL, 1, 'irls')"  # two passes streamed, each in parallel


@pytest.mark.parametrize("call", [LINREGR, IRLS, CG, ONE], ids=["linregr", "logregr-irls", "logregr-cg", "two-passes"])
def test_parallel_workers_train_what_the_serial_path_trains(pdb, call):
    serial, ts = _train(pdb, call, "m_serial", 0)
    par, tp = _train(pdb, call, "m_par", 2)
    assert ts["workers"] == 0 and ts["producers"] == 1 and ts["path"] == "pages"
    assert tp["workers"] == 2 and tp["producers"] == 2 and tp["path"] == "pages"
    assert tp["passes"] == ts["passes"] and (tp["passes"] == 2) == (call == ONE)
    assert tp["produce"] > 0 and 0 < tp["produce_max"] <= tp["produce"]
    np.testing.assert_allclose(par, serial, rtol=1e-9, atol=1e-12)
    if call == LINREGR:
        np.testing.assert_allclose(par, _lstsq(pdb), rtol=1e-9)
        stats = "r2, std_err, t_stats, p_values, condition_no, num_rows_processed"
    else:
        stats = "log_likelihood, std_err, z_stats, num_rows_processed, num_iterations"
    a = pdb.execute(f"SELECT {stats} FROM m_serial").fetchone()
    b = pdb.execute(f"SELECT {stats} FROM m_par").fetchone()
    for x, z in zip(a, b):
        np.testing.assert_allclose(np.array(z, float), np.array(x, float), rtol=1e-9, atol=1e-12)


def test_postgresqls_settings_decide_the_workers(pdb):
    """By default (-1) the workers PostgreSQL's planner gives a parallel scan of the table's
    pages: none under min_parallel_table_scan_size nor with max_parallel_workers_per_gather 0;
    the table's parallel_workers storage parameter; at most max_parallel_workers_per_gather."""
    pdb.execute("RESET learnedidx.parallel_workers")
    pdb.execute("SET min_parallel_table_scan_size = '1GB'")
    assert _train(pdb, LINREGR, "d1", None)[1]["workers"] == 0  # below the threshold
    pdb.execute("SET min_parallel_table_scan_size = 0")
    assert _train(pdb, LINREGR, "d2", None)[1]["workers"] == 2  # the default max_parallel_workers_per_gather
    pdb.execute("SET max_parallel_workers_per_gather = 1")
    assert _train(pdb, LINREGR, "d3", None)[1]["workers"] == 1
    pdb.execute("SET max_parallel_workers_per_gather = 0")
    assert _train(pdb, LINREGR, "d4", 2)[1]["workers"] == 0  # also caps the explicit setting
    pdb.execute("RESET max_parallel_workers_per_gather")
    pdb.execute("ALTER TABLE big SET (parallel_workers = 1)")
    assert _train(pdb, LINREGR, "d5", -1)[1]["workers"] == 1
    pdb.execute("SET max_parallel_workers = 0")  # the pool is empty: the backend reads
    coef, t = _train(pdb, LINREGR, "d6", 2)
    assert t["workers"] == 0 and t["producers"] == 1
    np.testing.assert_allclose(coef, _lstsq(pdb), rtol=1e-9)


def test_order_dependent_training_and_temporary_tables_read_serially(pdb):
    pdb.execute("SET learnedidx.parallel_workers = 2")
    pdb.execute("SELECT learnedidx.register_algorithm('sgd_ls', %s)",
                ("epochs = 1\ndef gradient(w, x, y):\n    return (dot(w, x) - y) * x\n",))
    calls = ["svm_classification('big', '{out}', 'c', 'features', 'linear', NULL, NULL, 'max_iter=1')",
             "svm_train('big', '{out}', 'c', 'features', max_iter => 1)",
             "logregr_train('big', '{out}', 'c', 'features', NULL, 2, 'igd')"]
    for i, call in enumerate(calls):
        assert _train(pdb, call, f"o{i}", None)[1]["workers"] == 0, call
    pdb.execute("SELECT * FROM learnedidx.train('sgd_ls', 'big', 'y', 'features', '{}', 'o_sgd')")
    assert pdb.execute("SELECT timings->'workers' FROM o_sgd_summary").fetchone() == (0,)
    pdb.execute("CREATE TEMP TABLE tbig AS SELECT * FROM big")
    coef, t = _train(pdb, LINREGR.replace("'big'", "'tbig'"), "o3", None)
    assert t["workers"] == 0 and t["path"] == "pages"
    np.testing.assert_allclose(coef, _lstsq(pdb), rtol=1e-9)


@pytest.mark.parametrize("isolation", ["READ COMMITTED", "REPEATABLE READ"])
def test_workers_see_the_callers_snapshot_not_concurrent_transactions(pdb, isolation):
    """Another transaction's uncommitted inserts and deletes are not seen, the caller's own
    uncommitted ones are: the workers read in the caller's snapshot and transaction.  In
    REPEATABLE READ, rows another transaction committed after the caller's snapshot are not
    seen either."""
    with connect(pdb, autocommit=False) as other, connect(pdb, autocommit=False) as late, \
            connect(pdb, autocommit=False) as me:
        me.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
        me.execute("SET learnedidx.parallel_workers = 2")
        other.execute("INSERT INTO big (y, features) SELECT 1e6, ARRAY[1,2,3,4,5,6,7,8,9,10]::float8[] "
                      "FROM generate_series(1, 5000)")
        other.execute("DELETE FROM big WHERE id % 2 = 1 AND id % 3 = 0")  # rows of its own: no lock waits
        me.execute("DELETE FROM big WHERE id % 2 = 0 AND id % 5 = 0")  # the caller's snapshot is taken
        late.execute("DELETE FROM big WHERE id % 2 = 0 AND id % 7 = 0 AND id % 5 <> 0")  # rows nobody locked
        late.execute("INSERT INTO big (y, features) SELECT -5e5, ARRAY[9,0,9,0,9,0,9,0,9,0]::float8[] "
                      "FROM generate_series(1, 700)")
        late.commit()  # after the caller's snapshot: seen in READ COMMITTED's next statement only
        me.execute("INSERT INTO big (y, features) SELECT -1e3, ARRAY[0,1,0,1,0,1,0,1,0,2]::float8[] "
                   "FROM generate_series(1, 300)")
        expect = _lstsq(me)
        n = me.execute("SELECT count(*) FROM big").fetchone()[0]
        coef, t = _train(me, LINREGR, "snap", None)
        assert t["workers"] == 2
        late_rows = 700 - (ROWS // 14 - ROWS // 70) if isolation == "READ COMMITTED" else 0
        assert me.execute("SELECT num_rows_processed FROM snap").fetchone()[0] == n == \
            ROWS - ROWS // 10 + 300 + late_rows
        np.testing.assert_allclose(coef, expect, rtol=1e-9)
        me.rollback()
        other.rollback()


def test_the_callers_privileges_hold_row_level_security_reads_the_query_path(pdb):
    reader = make_role(pdb, "par_reader")
    pdb.execute(f"GRANT SELECT (y, features) ON big TO {reader}")
    pdb.execute(f"GRANT CREATE ON SCHEMA public TO {reader}")
    with connect(pdb, user=reader) as r:
        coef, t = _train(r, LINREGR, "priv", 2)  # column privileges: the page path, in parallel
        assert t["workers"] == 2
        np.testing.assert_allclose(coef, _lstsq(pdb), rtol=1e-9)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            r.execute("SELECT * FROM learnedidx.linregr_train('big', 'nope', 'c', 'features')")
    pdb.execute(f"GRANT SELECT ON big TO {reader}")
    pdb.execute("ALTER TABLE big ENABLE ROW LEVEL SECURITY")
    pdb.execute(f"CREATE POLICY half ON big TO {reader} USING (id % 2 = 0)")
    with connect(pdb, user=reader) as r:
        coef, t = _train(r, LINREGR, "rls", 2)
        assert t["workers"] == 0 and t["path"] == "query"
        assert r.execute("SELECT num_rows_processed FROM rls").fetchone()[0] == ROWS // 2
        np.testing.assert_allclose(coef, _lstsq(pdb, "WHERE id % 2 = 0"), rtol=1e-9)


class _StuckServer:
    """Answers as the server does up to the first pass, with a ring of two one-page slots that
    it never frees, and gives the ring to the parallel workers that ask (indb.ring); so the
    workers fill the ring and wait.  ``filled`` is set once both slots are."""

    def __init__(self, path: str, give_ring: bool = True) -> None:
        from learnedidx.server import stream as S

        self.give_ring = give_ring
        self.token = bytes(range(16))
        self.fd = _sealed_memfd(2 * S.PAGE_SIZE)
        self.filled = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        first = True
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            t = threading.Thread(target=self._call if first else self._ring, args=(conn,), daemon=True)
            first = False
            t.start()

    def _call(self, conn) -> None:
        from learnedidx.server import protocol as P
        from learnedidx.server import stream as S

        with conn, contextlib_suppress():
            conn.sendall(P.encode(P.HELLO))
            P.read_frame(conn)
            socket.send_fds(conn, [P.encode_binary(P.CONTROL, S.RING.pack(b"M", 2, S.PAGE_SIZE, self.token))],
                            [self.fd])
            conn.sendall(P.encode_binary(P.CONTROL, S.CONTROL.pack(b"S", S.AS_CHOSEN | S.ANY_ORDER, 1)))
            slots = 0
            conn.settimeout(60)
            with contextlib_suppress():
                while True:
                    flags, n = P.read_header(conn)
                    body = P._recv_exact(conn, n)
                    if flags == P.DATA and body[:1] == b"K":
                        slots += 1
                        if slots == 2:
                            self.filled.set()

    def _ring(self, conn) -> None:
        from learnedidx.server import protocol as P
        from learnedidx.server import stream as S

        with conn, contextlib_suppress():  # a worker the call's end terminated may hang up at any point
            conn.sendall(P.encode(P.HELLO))
            req = P.read_frame(conn)
            if self.give_ring and req["args"]["token"] == self.token.hex():
                socket.send_fds(conn, [P.encode_binary(P.CONTROL, S.RING.pack(b"M", 2, S.PAGE_SIZE, self.token))],
                                [self.fd])
                conn.sendall(P.encode({"id": 1, "ok": True, "result": {}}))
            else:
                conn.sendall(P.encode({"id": 1, "ok": False, "error": {"kind": "bad-request", "message": "no"}}))
            conn.settimeout(60)
            with contextlib_suppress():
                while conn.recv(1 << 16):
                    pass

    def close(self) -> None:
        import os
        self.listener.close()
        os.close(self.fd)


def contextlib_suppress():
    import contextlib
    return contextlib.suppress(OSError, ConnectionError)


def _sealed_memfd(size: int) -> int:
    import fcntl
    import os
    fd = os.memfd_create("stuck-ring", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def _workers_of(probe, pid: int) -> int:
    return probe.execute("SELECT count(*) FROM pg_stat_activity WHERE leader_pid = %s AND pid <> %s",
                         (pid, pid)).fetchone()[0]


@pytest.mark.parametrize("how", ["pg_cancel_backend", "statement_timeout"])
def test_a_cancel_mid_pass_ends_the_call_and_its_workers(pdb, tmp_path, how):
    """The server stops freeing slots, so the workers wait for one mid-pass: pg_cancel_backend
    (or statement_timeout) ends the call with 57014, leaves no output table, and no parallel
    worker runs after it."""
    stuck = _StuckServer(str(tmp_path / "stuck.sock"))
    errors: list = []
    with connect(pdb) as caller, connect(pdb) as probe:
        pid = caller.info.backend_pid
        caller.execute("SELECT set_config('learnedidx.socket', %s, false)", (str(tmp_path / "stuck.sock"),))
        caller.execute("SET learnedidx.parallel_workers = 2")
        if how == "statement_timeout":
            caller.execute("SET statement_timeout = '5s'")

        def run():
            try:
                caller.execute("SELECT * FROM learnedidx.linregr_train('big', 'stuck_m', 'y', 'features')")
            except psycopg.Error as exc:
                errors.append(exc)

        t = threading.Thread(target=run)
        t.start()
        try:
            if how == "pg_cancel_backend":  # (the timeout needs no event: it fires wherever the call is)
                assert stuck.filled.wait(60), "the workers never filled the ring"
                assert _workers_of(probe, pid) == 2
                assert probe.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone() == (True,)
            t.join(60)
        finally:
            stuck.close()
        assert not t.is_alive() and len(errors) == 1 and isinstance(errors[0], psycopg.errors.QueryCanceled)
        assert _workers_of(probe, pid) == 0
        assert caller.execute("SELECT to_regclass('stuck_m')").fetchone() == (None,)


def test_a_worker_refused_the_ring_fails_the_call_with_no_worker_left(pdb, tmp_path):
    stuck = _StuckServer(str(tmp_path / "refuse.sock"), give_ring=False)
    try:
        with connect(pdb) as caller, connect(pdb) as probe:
            caller.execute("SELECT set_config('learnedidx.socket', %s, false)", (str(tmp_path / "refuse.sock"),))
            caller.execute("SET learnedidx.parallel_workers = 2")
            with pytest.raises(psycopg.errors.ProtocolViolation, match="did not give a parallel worker the call's ring"):
                caller.execute("SELECT * FROM learnedidx.linregr_train('big', 'refused', 'y', 'features')")
            assert _workers_of(probe, caller.info.backend_pid) == 0
            assert caller.execute("SELECT count(*) FROM big").fetchone() == (ROWS,)  # the session lives on
    finally:
        stuck.close()


def test_a_partitioned_table_is_read_partition_after_partition(pdb):
    """Each partition gets its own parallel scan; every slot follows its partition's layout,
    even when the partitions' columns lie differently (a dropped column in one)."""
    pdb.execute("CREATE TABLE parts (id int, y float8, features float8[]) PARTITION BY RANGE (id)")
    pdb.execute("CREATE TABLE parts_a PARTITION OF parts FOR VALUES FROM (MINVALUE) TO (15000)")
    pdb.execute("CREATE TABLE parts_b (junk text, id int, y float8, features float8[])")
    pdb.execute("ALTER TABLE parts_b DROP COLUMN junk")
    pdb.execute("ALTER TABLE parts ATTACH PARTITION parts_b FOR VALUES FROM (15000) TO (30000)")
    pdb.execute("CREATE TABLE parts_empty PARTITION OF parts FOR VALUES FROM (30000) TO (30001)")
    pdb.execute("CREATE TABLE parts_c PARTITION OF parts FOR VALUES FROM (30001) TO (MAXVALUE)")
    pdb.execute("INSERT INTO parts SELECT id, y, features FROM big WHERE id <> 30000")
    pdb.execute("DELETE FROM big WHERE id = 30000")
    coef, t = _train(pdb, LINREGR.replace("'big'", "'parts'"), "pm", 2)
    assert t["workers"] == 2 and t["path"] == "pages"
    assert pdb.execute("SELECT num_rows_processed FROM pm").fetchone()[0] == ROWS - 1
    np.testing.assert_allclose(coef, _lstsq(pdb), rtol=1e-9)


def test_the_ring_goes_only_to_whoever_names_its_call(accel_server):
    """indb.ring answers a token no call holds with an error and no descriptor."""
    from learnedidx.server import protocol as P

    with socket.socket(socket.AF_UNIX) as s:
        s.connect(accel_server.socket_path)
        s.settimeout(30)
        P.read_hello(s)
        for token in (bytes(16).hex(), "zz" * 16, 7):
            s.sendall(P.encode({"op": "indb.ring", "id": 1, "args": {"token": token}}))
            msg, fds, _, _ = socket.recv_fds(s, 1 << 16, 1)
            assert fds == []
            reply = P.parse_json(msg[P.HEADER.size:])
            assert reply["ok"] is False and reply["error"]["kind"] == "bad-request"


def test_the_ring_is_not_passed_over_tcp():
    from learnedidx.errors import NotSupportedError
    from learnedidx.server.handlers.indb import indb_ring
    from learnedidx.server.registry import HandlerContext

    with pytest.raises(NotSupportedError, match="Unix socket only"):
        indb_ring({"token": "00" * 16}, {}, HandlerContext(server=None, peer="tcp", stream=object()))
