"""Training over shards (docs/indb.md, "Training over shards"): a partitioned table whose
partitions are postgres_fdw foreign tables on two other real clusters (each with the extension
and its own accelerator server) and a local table; the oracle is the same call on one table
holding the same rows.  Only statistics cross the network: the summary counts the bytes."""
from __future__ import annotations

import json
import threading

import numpy as np
import psycopg
import pytest
from pytest_postgresql import factories

from learnedidx.server.process import spawn
from tests.indb.conftest import connect, make_role
from tests.pgfixtures import PG_BINDIR

_OPTS = "-c max_connections=30 -c shared_buffers=32MB -c fsync=off"
shard_a_proc = factories.postgresql_proc(executable=f"{PG_BINDIR}/pg_ctl", port=None, postgres_options=_OPTS)
shard_b_proc = factories.postgresql_proc(executable=f"{PG_BINDIR}/pg_ctl", port=None, postgres_options=_OPTS)

N, P = 3000, 3
CUTS = (1000, 2000)  # ids [1, 1000) on shard a, [1000, 2000) on shard b, the rest local


def _rows() -> list[tuple]:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, P)) * [1.0, 10.0, 0.1]
    y = X @ [2.0, -0.3, 5.0] + 1.5 + rng.normal(size=N)
    label = (X[:, 0] + 0.2 * X[:, 1] + rng.logistic(size=N) > 0)
    g = rng.integers(0, 3, size=N)
    return [(i + 1, float(y[i]), bool(label[i]), int(g[i]), *map(float, X[i])) for i in range(N)]


ROWS = _rows()
COLS = "id int, y float8, label boolean, g int, x1 float8, x2 float8, x3 float8"


def _fill(conn: psycopg.Connection, table: str, lo: int, hi: int) -> None:
    conn.execute(f"CREATE TABLE {table} ({COLS})")
    with conn.cursor().copy(f"COPY {table} FROM STDIN") as cp:
        for r in ROWS:
            if lo <= r[0] < hi:
                cp.write_row(r)


class Shard:
    def __init__(self, proc, sock: str, lo: int, hi: int) -> None:
        self.proc, self.server = proc, spawn(sock, backend="cpu", warm=False)
        with psycopg.connect(host=proc.host, port=proc.port, user=proc.user, dbname="postgres",
                             autocommit=True) as c:
            c.execute("DROP DATABASE IF EXISTS shard")
            c.execute("CREATE DATABASE shard")
        self.conn = psycopg.connect(host=proc.host, port=proc.port, user=proc.user, dbname="shard", autocommit=True)
        self.conn.execute("CREATE EXTENSION learnedidx CASCADE")
        self.conn.execute(f"ALTER DATABASE shard SET learnedidx.socket = '{sock}'")
        _fill(self.conn, "part", lo, hi)


@pytest.fixture(scope="module")
def shards(shard_a_proc, shard_b_proc, tmp_path_factory):
    a = Shard(shard_a_proc, str(tmp_path_factory.mktemp("sa") / "accel.sock"), 1, CUTS[0])
    b = Shard(shard_b_proc, str(tmp_path_factory.mktemp("sb") / "accel.sock"), CUTS[0], CUTS[1])
    b.conn.execute('ALTER TABLE part RENAME COLUMN x2 TO "X two"')  # the foreign table's column_name names it
    yield a, b
    for s in (a, b):
        s.conn.close()
        s.server.stop()


@pytest.fixture
def coord(db, shards):
    """The coordinator: ``parted`` (two postgres_fdw partitions, one local) and ``one`` (the same
    rows in one table)."""
    db.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    db.execute(f"CREATE TABLE parted ({COLS}) PARTITION BY RANGE (id)")
    for name, s, lo, hi in (("a", shards[0], 1, CUTS[0]), ("b", shards[1], CUTS[0], CUTS[1])):
        db.execute(f"CREATE SERVER shard_{name} FOREIGN DATA WRAPPER postgres_fdw "
                   f"OPTIONS (host '{s.proc.host}', port '{s.proc.port}', dbname 'shard')")
        db.execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER shard_{name} OPTIONS (user '{s.proc.user}')")
        db.execute(f"CREATE FOREIGN TABLE parted_{name} PARTITION OF parted FOR VALUES FROM ({lo}) TO ({hi}) "
                   f"SERVER shard_{name} OPTIONS (schema_name 'public', table_name 'part')")
    db.execute("ALTER FOREIGN TABLE parted_b ALTER COLUMN x2 OPTIONS (column_name 'X two')")
    db.execute(f"CREATE TABLE parted_local PARTITION OF parted FOR VALUES FROM ({CUTS[1]}) TO (MAXVALUE)")
    db.execute(f"INSERT INTO parted_local SELECT * FROM (VALUES {_values(CUTS[1], N + 1)}) AS v")
    _fill(db, "one", 1, N + 1)
    return db


def _values(lo: int, hi: int) -> str:
    return ", ".join("(%d, %r, %s, %d, %r, %r, %r)" % r for r in ROWS if lo <= r[0] < hi)


STATS = {"linregr": ("coef", "r2", "std_err", "t_stats", "p_values", "condition_no", "variance_covariance",
                     "num_rows_processed"),
         "logregr": ("coef", "log_likelihood", "std_err", "z_stats", "p_values", "odds_ratios", "condition_no",
                     "num_iterations", "variance_covariance", "num_rows_processed")}


def _close(a, b) -> None:
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-9, atol=1e-12)


def _compare(db, fn: str, dep: str, grouping: str | None = None, extra: str = "", tag: str = "m",
             indep: str = "ARRAY[1, x1, x2, x3]") -> dict:
    """fn over parted and over one: every statistic equal; returns parted's summary."""
    g = "NULL" if grouping is None else f"'{grouping}'"
    for src in ("parted", "one"):
        db.execute(f"SELECT * FROM learnedidx.{fn}_train('{src}', '{tag}_{src}', '{dep}', '{indep}', {g}{extra})")
    order = "" if grouping is None else f" ORDER BY {grouping}"
    got = db.execute(f"SELECT {', '.join(STATS[fn])} FROM {tag}_parted{order}").fetchall()
    want = db.execute(f"SELECT {', '.join(STATS[fn])} FROM {tag}_one{order}").fetchall()
    assert len(got) == len(want) == (1 if grouping is None else 3)
    for r, w in zip(got, want):
        for name, a, b in zip(STATS[fn], r, w):
            assert a is not None, name
            _close(a, b)
    if grouping is not None:
        assert db.execute(f"SELECT array_agg({grouping} ORDER BY {grouping}) FROM {tag}_parted").fetchone()[0] == \
            [0, 1, 2]
    return db.execute(f"SELECT read_path, timings FROM {tag}_parted_summary").fetchone()


def test_linregr_over_shards_equals_one_node(coord):
    path, timings = _compare(coord, "linregr", "y")
    assert path == "shards"
    sh = timings["shards"]
    assert sh["calls"] == 1 and sh["partitions"] == 3
    # statistics only: the two shards' replies hold a 5x5 R factor each, not 2000 rows
    assert 0 < sh["bytes_received"] < 3000, sh
    # the shards read their own pages through their own servers
    assert sh["shard_paths"] and set(sh["shard_paths"]) <= {"pages", "query"}


def test_linregr_groups_span_shards(coord):
    path, _ = _compare(coord, "linregr", "y", "g")
    assert path == "shards"
    # without an intercept too
    assert _compare(coord, "linregr", "y", "g", tag="n", indep="ARRAY[x1, x2, x3]")[0] == "shards"


def test_a_group_on_one_shard_and_rows_with_nulls(coord, shards):
    """A group only shard a has, and rows a NULL makes unusable on shard b: the groups, their
    counts and models as on one node."""
    a, b = shards[0].conn, shards[1].conn
    for conn, table in ((a, "part"), (coord, "one")):
        conn.execute(f"UPDATE {table} SET g = 7 WHERE id < 100")
    for conn, table in ((b, "part"), (coord, "one")):
        conn.execute(f"UPDATE {table} SET y = NULL WHERE id BETWEEN 1100 AND 1109")
    try:
        for fn, dep in (("linregr", "y"), ("logregr", "label")):
            g = "NULL" if fn == "linregr" else "'g'"
            for src in ("parted", "one"):
                coord.execute(f"SELECT * FROM learnedidx.{fn}_train('{src}', 'k_{fn}_{src}', '{dep}', 'ARRAY[1, x1]', "
                              f"{g})")
            cols = "g, " if fn == "logregr" else ""
            got, want = (coord.execute(f"SELECT {cols}coef, num_rows_processed, num_missing_rows_skipped "
                                       f"FROM k_{fn}_{src} {'ORDER BY g' if cols else ''}").fetchall()
                         for src in ("parted", "one"))
            assert len(got) == len(want) == (4 if fn == "logregr" else 1)
            for r, w in zip(got, want):
                assert r[:-3] == w[:-3] and r[-2:] == w[-2:]  # the group, the counts
                _close(r[-3], w[-3])
            assert coord.execute(f"SELECT read_path FROM k_{fn}_parted_summary").fetchone()[0] == "shards"
        assert got[-1][0] == 7
        skipped = coord.execute("SELECT num_missing_rows_skipped FROM k_linregr_parted").fetchone()[0]
        assert skipped == 10
    finally:  # the shards' rows as they were (the coordinator's database is the test's own)
        for r in ROWS:
            if r[0] < 100:
                a.execute("UPDATE part SET g = %s WHERE id = %s", (r[3], r[0]))
            elif 1100 <= r[0] <= 1109:
                b.execute("UPDATE part SET y = %s WHERE id = %s", (r[1], r[0]))


def test_logregr_over_shards_equals_one_node(coord):
    path, timings = _compare(coord, "logregr", "label", extra=", 20, 'irls', 1e-10")
    assert path == "shards"
    it = coord.execute("SELECT num_iterations FROM m_parted").fetchone()[0]
    assert it > 2 and timings["shards"]["calls"] == it + 1  # one pass per iteration, one at the result
    # each partition streamed its rows once: its server kept them for the later passes
    assert timings["shards"]["passes_streamed"] == 3
    assert _compare(coord, "logregr", "label", "g", ", 20, 'cg', 1e-10", tag="g")[0] == "shards"


def test_other_calls_read_rows_as_before(coord):
    """svm and expressions over shards: the query path through postgres_fdw, as before."""
    coord.execute("SELECT * FROM learnedidx.linregr_train('parted', 'm_expr', 'y', 'ARRAY[1, x1 * 2, x2, x3]')")
    coord.execute("SELECT * FROM learnedidx.svm_train('parted', 'm_svm', 'label', 'ARRAY[1, x1, x2]')")
    for m in ("m_expr", "m_svm"):
        assert coord.execute(f"SELECT read_path FROM {m}_summary").fetchone()[0] not in ("shards", None)


MY_LOGIT = """
epochs = 6
tolerance = 0
labels = "binary"

def acc_grad(w, x, y):
    return (y - 1.0 / (1.0 + exp(-dot(w, x)))) * x

def acc_hess(w, x, y):
    p = 1.0 / (1.0 + exp(-dot(w, x)))
    return p * (1.0 - p) * outer(x, x)

def update(w, grad, hess):
    return w + solve(hess, grad)

def loss(w, x, y):
    z = dot(w, x)
    return log1p(exp(-abs(z))) + max(z, 0.0) - y * z
"""


def test_dsl_accumulate_algorithm_over_shards(coord):
    """A DSL accumulate algorithm (its accumulators summed over the shards, its update on the
    coordinator's server) equals one node's: its model, loss and epochs."""
    coord.execute("SELECT learnedidx.register_algorithm('my_logit', %s)", (MY_LOGIT,))
    for src in ("parted", "one"):
        coord.execute(f"SELECT * FROM learnedidx.train('my_logit', '{src}', 'label', 'ARRAY[1, x1, x2, x3]', "
                      f"out_table => 'd_{src}')")
    got, want = (coord.execute(f"SELECT coef, loss, num_iterations, num_rows_processed FROM d_{src}").fetchone()
                 for src in ("parted", "one"))
    assert (got[2], got[3]) == (want[2], want[3]) == (6, N), (got, want)
    _close(got[0], want[0])
    _close(got[1], want[1])
    path, timings = coord.execute("SELECT read_path, timings FROM d_parted_summary").fetchone()
    # six epochs and the loss pass; each partition streamed once
    assert path == "shards" and timings["shards"]["calls"] == 7 and timings["shards"]["passes_streamed"] == 3


def test_shard_down_is_08(coord, shards):
    coord.execute("ALTER SERVER shard_b OPTIONS (SET port '1')")
    with pytest.raises(psycopg.errors.SqlclientUnableToEstablishSqlconnection):
        coord.execute("SELECT * FROM learnedidx.linregr_train('parted', 'm_down', 'y', 'ARRAY[1, x1]')")
    assert coord.execute("SELECT to_regclass('m_down') IS NULL").fetchone()[0]


def test_shard_without_extension_is_0A000(coord, shards):
    other = shards[1].proc
    with psycopg.connect(host=other.host, port=other.port, user=other.user, dbname="postgres",
                         autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS bare")
        c.execute("CREATE DATABASE bare")
    coord.execute("ALTER SERVER shard_b OPTIONS (SET dbname 'bare')")
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="no learnedidx extension"):
        coord.execute("SELECT * FROM learnedidx.linregr_train('parted', 'm_bare', 'y', 'ARRAY[1, x1]')")
    a = shards[0].conn
    a.execute("UPDATE pg_extension SET extversion = '0.0' WHERE extname = 'learnedidx'")
    try:
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="has learnedidx 0.0"):
            coord.execute("SELECT * FROM learnedidx.logregr_train('parted', 'm_old', 'label', 'ARRAY[1, x1]')")
    finally:
        a.execute("UPDATE pg_extension SET extversion = %s WHERE extname = 'learnedidx'",
                  (coord.execute("SELECT extversion FROM pg_extension WHERE extname = 'learnedidx'").fetchone()[0],))
    # a shard without the table: the shard's own SQLSTATE
    coord.execute("ALTER SERVER shard_b OPTIONS (SET dbname 'shard')")
    coord.execute("ALTER FOREIGN TABLE parted_b OPTIONS (SET table_name 'gone')")
    with pytest.raises(psycopg.errors.UndefinedTable):
        coord.execute("SELECT * FROM learnedidx.linregr_train('parted', 'm_gone', 'y', 'ARRAY[1, x1]')")
    assert coord.execute("SELECT to_regclass('m_bare'), to_regclass('m_old'), to_regclass('m_gone')").fetchone() == \
        (None, None, None)


def test_shard_error_reaches_the_caller_and_nothing_is_left(coord, shards):
    """A shard's own error (a NaN feature on shard b only) reaches the caller with its SQLSTATE;
    no output table, no query left on either shard."""
    b = shards[1].conn
    old = b.execute("SELECT x1 FROM part WHERE id = 1500").fetchone()[0]
    b.execute("UPDATE part SET x1 = 'NaN' WHERE id = 1500")
    try:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="finite"):
            coord.execute("SELECT * FROM learnedidx.logregr_train('parted', 'm_bad', 'label', 'ARRAY[1, x1]')")
    finally:
        b.execute("UPDATE part SET x1 = %s WHERE id = 1500", (old,))
    assert coord.execute("SELECT to_regclass('m_bad') IS NULL").fetchone()[0]
    for s in shards:
        assert s.conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = 'shard' "
                              "AND state = 'active' AND pid <> pg_backend_pid()").fetchone()[0] == 0


def test_cancel_is_57014_and_stops_the_shards(coord, shards):
    """A cancelled call (cancelled while the shards work: one holds a lock the pass waits for)."""
    locker = psycopg.connect(host=shards[0].proc.host, port=shards[0].proc.port, user=shards[0].proc.user,
                             dbname="shard")
    locker.execute("LOCK TABLE part IN ACCESS EXCLUSIVE MODE")
    caller = connect(coord)
    pid = caller.info.backend_pid
    err: list = []

    def call():
        try:
            caller.execute("SELECT * FROM learnedidx.linregr_train('parted', 'm_cancel', 'y', 'ARRAY[1, x1]')")
        except psycopg.Error as e:
            err.append(e)
    t = threading.Thread(target=call)
    t.start()
    try:
        # the shard's pass is waiting for the lock: an event, not a sleep
        while t.is_alive() and not shards[0].conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted"
                                                          ).fetchone()[0]:
            pass
        coord.execute("SELECT pg_cancel_backend(%s)", (pid,))
        t.join(60)
    finally:
        locker.close()
    assert err and isinstance(err[0], psycopg.errors.QueryCanceled)
    shards[0].conn.execute("SELECT 1")
    # the shard's query was cancelled too: nothing waits there any more
    assert shards[0].conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = 'shard' AND "
                                  "wait_event_type = 'Lock'").fetchone()[0] == 0
    caller.close()


def test_privileges_are_the_partitioned_tables_and_the_mappings(coord, shards):
    """The caller needs SELECT on the partitioned table (not on its partitions); on the shard
    the rows are the mapped role's: its row-level security applies, as through postgres_fdw."""
    alice = make_role(coord, "shard_alice")
    coord.execute(f"GRANT CREATE ON SCHEMA public TO {alice}")
    for name in ("a", "b"):
        coord.execute(f"CREATE USER MAPPING FOR {alice} SERVER shard_{name} OPTIONS (user 'shard_reader', "
                      "password_required 'false')")
    for s in shards:
        s.conn.execute("DROP ROLE IF EXISTS shard_reader")
        s.conn.execute("CREATE ROLE shard_reader LOGIN")
        s.conn.execute("GRANT SELECT ON part TO shard_reader")
    with connect(coord, alice) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT * FROM learnedidx.linregr_train('parted', 'm_alice', 'y', 'ARRAY[1, x1]')")
    coord.execute(f"GRANT SELECT ON parted TO {alice}")
    # shard a shows the mapped role only its rows with id < 500
    a = shards[0].conn
    a.execute("ALTER TABLE part ENABLE ROW LEVEL SECURITY")
    a.execute("CREATE POLICY low ON part FOR SELECT TO shard_reader USING (id < 500)")
    try:
        with connect(coord, alice) as c:
            c.execute("SELECT * FROM learnedidx.linregr_train('parted', 'm_alice', 'y', 'ARRAY[1, x1]')")
            got = c.execute("SELECT coef, num_rows_processed FROM m_alice").fetchone()
            assert c.execute("SELECT read_path FROM m_alice_summary").fetchone()[0] == "shards"
            # the oracle: the same SELECT through postgres_fdw, as alice
            rows = c.execute("SELECT y, x1 FROM parted").fetchall()
        assert got[1] == len(rows) == N - (CUTS[0] - 500)
        y, x = np.array(rows).T
        _close(got[0], np.linalg.lstsq(np.c_[np.ones(len(x)), x], y, rcond=None)[0])
    finally:
        a.execute("DROP POLICY low ON part")
        a.execute("ALTER TABLE part DISABLE ROW LEVEL SECURITY")


def test_the_shard_functions_called_directly(coord, shards):
    """_shard_states asks what a SELECT of those columns of the partitioned table asks, and
    reaches only its postgres_fdw partitions; a shard's _shard_state computes only the passes;
    a partitioned table with row-level security for the caller trains through the rows."""
    bob = make_role(coord, "shard_bob")
    for name in ("a", "b"):
        coord.execute(f"CREATE USER MAPPING FOR {bob} SERVER shard_{name} OPTIONS (user '{shards[0].proc.user}', "
                      "password_required 'false')")
    req = '{"algorithm": "linregr", "params": {"shard_pass": {}}, "ngroups": 0}'
    call = ("SELECT learnedidx._shard_states(%s, ARRAY['parted_a']::regclass[], %s, ARRAY[%s::jsonb], "
            "(SELECT extversion FROM pg_extension WHERE extname = 'learnedidx'))")
    with connect(coord, bob) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute(call, ("parted", ["y", "x1"], req))
        coord.execute(f"GRANT SELECT (y) ON parted TO {bob}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute(call, ("parted", ["y", "x1"], req))
        coord.execute(f"GRANT SELECT (x1) ON parted TO {bob}")
        reply = json.loads(json.loads(c.execute(call, ("parted", ["y", "x1"], req)).fetchone()[0][0])["reply"])
        assert reply["result"]["groups"][0]["n"] == CUTS[0] - 1 and "state" in reply["result"]["groups"][0]
        coord.execute(f"GRANT SELECT ON one TO {bob}")
        with pytest.raises(psycopg.errors.WrongObjectType):
            c.execute(call, ("one", ["y", "x1"], req))
    for bad, state in (('{"algorithm": "svm", "params": {"shard_pass": {}}, "ngroups": 0}', "0A000"),
                       ('{"algorithm": "linregr", "params": {}, "ngroups": 0}', "0A000"),
                       ('{"algorithm": "linregr", "params": {"shard_pass": {}}, "ngroups": 1}', "22023")):
        with pytest.raises(psycopg.Error) as e:
            shards[0].conn.execute("SELECT learnedidx._shard_state(%s, 'public', 'part', ARRAY['y', 'x1'])", (bad,))
        assert e.value.sqlstate == state
    # the parent's own policy: a shard could not apply it, so the rows come through postgres_fdw
    coord.execute("ALTER TABLE parted ENABLE ROW LEVEL SECURITY")
    coord.execute(f"CREATE POLICY odd ON parted FOR SELECT TO {bob} USING (id % 2 = 1)")
    coord.execute(f"GRANT SELECT ON parted TO {bob}")
    coord.execute(f"GRANT CREATE ON SCHEMA public TO {bob}")
    with connect(coord, bob) as c:
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            c.execute(call, ("parted", ["y", "x1"], req))
        c.execute("SELECT * FROM learnedidx.linregr_train('parted', 'm_bob', 'y', 'ARRAY[1, x1]')")
        assert c.execute("SELECT read_path FROM m_bob_summary").fetchone()[0] != "shards"
        assert c.execute("SELECT num_rows_processed FROM m_bob").fetchone()[0] == N // 2


def test_features_that_start_with_ones(coord, shards):
    """An array column whose first element is 1 is MADlib's intercept: over shards as on one
    node (the reserved intercept column dropped when every shard's rows start with 1)."""
    a = shards[0].conn
    a.execute("DROP TABLE IF EXISTS arr")
    a.execute("CREATE TABLE arr AS SELECT id, y, label, ARRAY[1, x1, x2] AS f FROM part")
    coord.execute("CREATE TABLE parr (id int, y float8, label boolean, f float8[]) PARTITION BY RANGE (id)")
    coord.execute(f"CREATE FOREIGN TABLE parr_a PARTITION OF parr FOR VALUES FROM (1) TO ({CUTS[0]}) "
                  "SERVER shard_a OPTIONS (table_name 'arr')")
    coord.execute(f"CREATE TABLE parr_local PARTITION OF parr FOR VALUES FROM ({CUTS[0]}) TO ({N + 1})")
    # and a shard without rows
    shards[1].conn.execute("DROP TABLE IF EXISTS arr_empty")
    shards[1].conn.execute("CREATE TABLE arr_empty (id int, y float8, label boolean, f float8[])")
    coord.execute(f"CREATE FOREIGN TABLE parr_b PARTITION OF parr FOR VALUES FROM ({N + 1}) TO (MAXVALUE) "
                  "SERVER shard_b OPTIONS (table_name 'arr_empty')")
    coord.execute("INSERT INTO parr_local SELECT id, y, label, ARRAY[1, x1, x2] FROM one WHERE id >= %s", (CUTS[0],))
    coord.execute("CREATE TABLE one_arr AS SELECT id, y, label, ARRAY[1, x1, x2] AS f FROM one")
    for fn, dep in (("linregr", "y"), ("logregr", "label")):
        for src in ("parr", "one_arr"):
            coord.execute(f"SELECT * FROM learnedidx.{fn}_train('{src}', 'o_{fn}_{src}', '{dep}', 'f')")
        got, want = (coord.execute(f"SELECT {', '.join(STATS[fn])} FROM o_{fn}_{src}").fetchone()
                     for src in ("parr", "one_arr"))
        for x, w in zip(got, want):
            _close(x, w)
        assert len(got[0]) == 3
        got, want = (coord.execute(f"SELECT read_path, intercept, num_features FROM o_{fn}_{src}_summary").fetchone()
                     for src in ("parr", "one_arr"))
        assert got == ("shards", *want[1:]) and want[1] is True


def test_kept_rows_are_given_back_only_when_unused():
    """The server's rows kept between passes: within the budget (least recently used given back
    first), never given back while a pass uses them, not used for another lead."""
    from learnedidx.indb.runtime.shards import Kept

    class Cache:
        released = 0

        def release(self):
            self.released += 1

    class Src:
        def __init__(self, n):
            self.cached = (np.zeros(n), np.ones((n, 2)))
            self.n, self.lead, self.ones, self._caches = n, 1, True, [Cache()]

    kept = Kept()
    a, b = Src(10), Src(10)
    ca, cb = a._caches[0], b._caches[0]
    size = 10 * 8 * 3
    kept.put("a" * 32, a, budget=2 * size)
    with kept.using("a" * 32, 0) as rows:
        assert rows is None  # another lead: not these rows
    with kept.using("a" * 32, 1) as rows:
        assert rows.n == 10 and rows.lead == 1
        kept.put("b" * 32, b, budget=size)  # evicts a's rows, in use: not given back yet
        assert ca.released == 0 and len(kept) == 1
    assert ca.released == 1
    kept.drop("b" * 32)
    assert cb.released == 1 and len(kept) == 0


BOOM = """
epochs = 3
tolerance = 0

def acc_s(w, x, y):
    return ((1.0 / (w[0] - w[0]) if w[0] != 0.0 else 1.0) if y > 5.0 else 1.0) * x

def update(w, n, s):
    return w + s / n
"""


def test_a_shards_error_mid_iteration(coord, shards):
    """An error of the algorithm on shard b in the second epoch (its only row with a label over
    5, once the model is not zero): one node's SQLSTATE (22012), no output table, nothing left
    running on the shards."""
    coord.execute("SELECT learnedidx.register_algorithm('boom', %s)", (BOOM,))
    b = shards[1].conn
    b.execute("UPDATE part SET g = 9 WHERE id = 1500")
    coord.execute("UPDATE one SET g = 9 WHERE id = 1500")
    try:
        for src in ("one", "parted"):
            with pytest.raises(psycopg.errors.DivisionByZero, match="boom: division by zero"):
                coord.execute(f"SELECT * FROM learnedidx.train('boom', '{src}', 'g', 'ARRAY[1, x1]', "
                              f"out_table => 'b_{src}')")
    finally:
        b.execute("UPDATE part SET g = %s WHERE id = 1500", (ROWS[1499][3],))
    assert coord.execute("SELECT to_regclass('b_parted') IS NULL").fetchone()[0]
    for s in shards:
        assert s.conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = 'shard' "
                              "AND state = 'active' AND pid <> pg_backend_pid()").fetchone()[0] == 0
