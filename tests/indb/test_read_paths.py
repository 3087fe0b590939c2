"""Both read paths against their oracle: a plain SELECT in the same statement context.

The page path streams heap pages whose visibility PostgreSQL decided (speculative insertions,
multixacts, subtransactions, frozen rows, the caller's own uncommitted writes); the query
path streams an SPI query's rows.  Each test makes PostgreSQL leave such tuples on the pages,
then checks that each path trains on exactly the rows the SELECT returns: the training is a
DSL algorithm whose model is the sums Σ y·x and Σ x·x over the rows it read, and the data
are integer-valued, so the sums are exact (or, with int8 values beyond 2^26, equal to 1e-13)
whatever the order of the rows.
"""
from __future__ import annotations

import itertools

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.indb.conftest import connect

pytestmark = pytest.mark.postgres

FINGERPRINTS = {
    "fp_yx": "epochs = 1\ndef acc_s(w, x, y):\n    return y * x\ndef update(w, s):\n    return s\n",
    "fp_xx": "epochs = 1\ndef acc_s(w, x, y):\n    return x * x\ndef update(w, s):\n    return s\n",
}
_names = itertools.count()


@pytest.fixture(params=[0, 2], ids=["serial", "parallel"])
def pg(db, request):
    """``db`` with the fingerprints registered; the page path read by the caller's backend, or
    by two parallel workers (extension/parallel.c: the fingerprints are sums, which the server
    lets parallel workers read), in every session of the database."""
    for name, source in FINGERPRINTS.items():
        db.execute("SELECT learnedidx.register_algorithm(%s, %s)", (name, source))
    db.execute(f'ALTER DATABASE "{db.info.dbname}" SET learnedidx.parallel_workers = {request.param}')
    db.execute(f"SET learnedidx.parallel_workers = {request.param}")
    return db


def trained(conn, source: str, dep: str, indep: str, reader: str) -> tuple:
    """(path, rows used, rows skipped, Σ y·x, Σ x·x) of what ``reader`` read (the page path
    with the parallel workers the session's setting asks for, checked)."""
    out = []
    workers = int(conn.execute("SELECT current_setting('learnedidx.parallel_workers')").fetchone()[0])
    for alg in FINGERPRINTS:
        name = f"fp_{next(_names)}"
        out.append(conn.execute(
            "SELECT num_rows_processed, num_rows_skipped, coef FROM learnedidx.train(%s, %s, %s, %s, %s, %s)",
            (alg, source, dep, indep, f'{{"intercept": false, "reader": "{reader}"}}', name)).fetchone())
        path, timings = conn.execute(f"SELECT read_path, timings FROM {name}_summary").fetchone()
        if path == "pages":
            assert timings["workers"] == workers
    (n, skipped, yx), (_, _, xx) = out
    return path, n, skipped, yx, xx


def selected(conn, source: str, dep: str, indep: list[str]) -> tuple:
    """The same from a plain SELECT: rows with a NULL (or a NULL element) skipped."""
    src = f"({source}) AS s" if source.startswith("SELECT") else source
    rows = conn.execute(f"SELECT {dep}, {', '.join(indep)} FROM {src}").fetchall()
    used, skipped, yx, xx = 0, 0, None, None
    for r in rows:
        feats = [v for c in r[1:] for v in (c if isinstance(c, list) else [c])] if None not in r else [None]
        if r[0] is None or None in feats:
            skipped += 1
            continue
        x = np.array(feats, float)
        yx = float(r[0]) * x + (0 if yx is None else yx)
        xx = x * x + (0 if xx is None else xx)
        used += 1
    return used, skipped, yx, xx


def check(conn, source: str, dep: str, indep: list[str], paths=("pages", "query")) -> int:
    """Each path trains on exactly what the SELECT returns (run in ``conn``'s transaction)."""
    want = selected(conn, source, dep, indep)
    for reader in paths:
        if want[0] == 0:
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="no rows"):
                trained(conn, source, dep, ", ".join(indep), reader)
            continue
        path, n, skipped, yx, xx = trained(conn, source, dep, ", ".join(indep), reader)
        assert path == reader
        assert (n, skipped) == want[:2], reader
        np.testing.assert_allclose(yx, want[2], rtol=1e-13, err_msg=reader)
        np.testing.assert_allclose(xx, want[3], rtol=1e-13, err_msg=reader)
    return want[0]


def test_types_nulls_dropped_columns_and_alignment(pg):
    pg.execute("CREATE TABLE t (a int2, y float8, b text, c int4, d int8, e float4, f float8[], g bool, h int4[], "
               "i real[], j oid)")
    pg.execute("INSERT INTO t SELECT i::int2, i % 50, repeat('x', i % 7), i, i::int8 * 1000000000, i / 4.0, "
               "ARRAY[i, -i, i * 0.25], i % 2 = 0, ARRAY[i, 2 * i], ARRAY[i]::real[], i FROM generate_series(1, 3000) i")
    pg.execute("UPDATE t SET y = NULL WHERE a % 97 = 0")
    pg.execute("UPDATE t SET f = ARRAY[1, NULL, 2]::float8[] WHERE a % 89 = 0")
    pg.execute("UPDATE t SET f = NULL WHERE a % 83 = 0")
    pg.execute("ALTER TABLE t DROP COLUMN b")  # still occupies space in every stored tuple
    check(pg, "t", "y", ["f"])
    check(pg, "t", "y", ["a", "c", "d", "e", "g", "j"])
    check(pg, "t", "g", ["h"])
    check(pg, "t", "d", ["i"])


def test_long_and_short_array_headers(pg):
    # 10 elements fit a 1-byte varlena header on disk, 40 need a 4-byte one
    pg.execute("CREATE TABLE s (y float4, v float8[])")
    pg.execute("INSERT INTO s SELECT i, ARRAY(SELECT (random() * 100)::int FROM generate_series(1, 10 + i * 0)) "
               "FROM generate_series(1, 500) i")
    check(pg, "s", "y", ["v"])
    pg.execute("CREATE TABLE l (y int8, v real[])")
    pg.execute("INSERT INTO l SELECT i, ARRAY(SELECT (random() * 100)::int::real FROM generate_series(1, 40 + i * 0)) "
               "FROM generate_series(1, 500) i")
    check(pg, "l", "y", ["v"])


def test_arrays_of_different_lengths_are_an_error_on_both_paths(pg):
    pg.execute("CREATE TABLE rag (y float8, v float8[])")
    pg.execute("INSERT INTO rag SELECT i, ARRAY[i, i] FROM generate_series(1, 50) i")
    pg.execute("INSERT INTO rag VALUES (51, '{1, 2, 3}'), (52, NULL), (53, '{1, NULL}')")
    for reader in ("pages", "query"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r'"v" has 3 elements in row .* but 2'):
            trained(pg, "rag", "y", "v", reader)
    pg.execute("DELETE FROM rag WHERE y = 51")  # NULLs and NULL elements are skipped, not errors
    assert check(pg, "rag", "y", ["v"]) == 50
    pg.execute("INSERT INTO rag VALUES (54, '{{1, 2}, {3, 4}}')")
    for reader in ("pages", "query"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="dimension"):
            trained(pg, "rag", "y", "v", reader)


def test_concurrent_updates_deletes_aborts_hot_and_locks(pg):
    pg.execute("SET lock_timeout = '20s'")
    pg.execute("CREATE TABLE m (id int PRIMARY KEY, y float8, x float8)")
    pg.execute("INSERT INTO m SELECT i, i, i * 2 FROM generate_series(1, 2000) i")
    pg.execute("DELETE FROM m WHERE id % 10 = 0")  # committed delete before the snapshot
    for _ in range(3):  # HOT chains: x is not indexed
        pg.execute("UPDATE m SET x = x + 1 WHERE id % 7 = 0")
    with connect(pg, autocommit=False) as aborted:  # an aborted insert and an aborted update
        aborted.execute("INSERT INTO m SELECT i, -1, -1 FROM generate_series(5001, 5100) i")
        aborted.execute("UPDATE m SET y = -y WHERE id % 5 = 0")
        aborted.rollback()
    sessions = [connect(pg, autocommit=False) for _ in range(4)]
    running, locker, sharer1, sharer2 = sessions
    try:
        running.execute("UPDATE m SET y = y + 2 WHERE id % 3 = 0")  # in progress at the snapshot, committed after
        running.execute("SAVEPOINT s")
        running.execute("INSERT INTO m SELECT i, 7, 7 FROM generate_series(6001, 6050) i")
        running.execute("RELEASE s")
        locker.execute("SELECT * FROM m WHERE id % 11 = 0 AND id % 3 <> 0 FOR UPDATE")
        shared = "SELECT * FROM m WHERE id % 13 = 0 AND id % 3 <> 0 AND id % 11 <> 0 FOR SHARE"
        sharer1.execute(shared)  # two share lockers: a multixact in xmax
        sharer2.execute(shared)
        with connect(pg, autocommit=False) as caller:
            caller.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            caller.execute("SELECT 1")  # the snapshot
            running.commit()  # after the snapshot: still invisible to it
            pg.execute("DELETE FROM m WHERE id % 4 = 0 AND id % 11 <> 0 AND id % 13 <> 0")
            pg.execute("INSERT INTO m SELECT i, 9, 9 FROM generate_series(7001, 7100) i")
            assert check(caller, "m", "y", ["x"]) == 1800  # 2000 rows minus the 200 deleted before the snapshot
            caller.rollback()
    finally:
        for c in sessions:
            c.close()


def test_subtransactions_and_the_callers_own_uncommitted_writes(pg):
    pg.execute("CREATE TABLE sx (y int, x int)")
    pg.execute("INSERT INTO sx SELECT i, i FROM generate_series(1, 300) i")
    with connect(pg, autocommit=False) as other:  # running, with a committed and an aborted subtransaction
        other.execute("INSERT INTO sx SELECT i, 1 FROM generate_series(301, 320) i")
        other.execute("SAVEPOINT a")
        other.execute("DELETE FROM sx WHERE y <= 10")
        other.execute("RELEASE a")
        other.execute("SAVEPOINT b")
        other.execute("UPDATE sx SET x = -x WHERE y > 290")
        other.execute("ROLLBACK TO b")
        with connect(pg, autocommit=False) as caller:
            caller.execute("INSERT INTO sx SELECT i, 2 FROM generate_series(1001, 1040) i")  # mine, uncommitted
            caller.execute("DELETE FROM sx WHERE y BETWEEN 100 AND 119")
            caller.execute("SAVEPOINT c")
            caller.execute("INSERT INTO sx SELECT i, 3 FROM generate_series(2001, 2005) i")
            caller.execute("ROLLBACK TO c")  # gone
            caller.execute("SAVEPOINT d")
            caller.execute("UPDATE sx SET x = x * 10 WHERE y BETWEEN 200 AND 209")
            caller.execute("RELEASE d")  # kept
            assert check(caller, "sx", "y", ["x"]) == 300 + 40 - 20
            other.commit()  # READ COMMITTED: the next statements see it
            assert check(caller, "sx", "y", ["x"]) == 300 + 40 - 20 + 20 - 10
            caller.rollback()


def test_frozen_rows_and_a_speculative_insertion_that_lost(pg):
    """VACUUM FREEZE, then an INSERT ... ON CONFLICT whose speculative tuple is super-deleted
    (t_xmin 0) because another session inserted the same key between its check and its index
    insertion: the tuple stays on the page, and no SELECT sees it."""
    pg.execute("CREATE EXTENSION IF NOT EXISTS dblink")
    pg.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")  # the oracle for what the page holds
    pg.execute("CREATE TABLE sp (k int, y int)")
    pg.execute("INSERT INTO sp SELECT i, i FROM generate_series(1, 20) i")
    pg.execute("VACUUM FREEZE sp")
    i = pg.info
    # An index expression runs twice for the speculative insert (check, then index insertion);
    # the second time it has another session insert and commit the same key.
    pg.execute(f"""CREATE FUNCTION racing_key(k int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
        BEGIN
            IF k = 42 AND current_setting('race.step', true) = '1' THEN
                PERFORM set_config('race.step', '2', false);
                PERFORM dblink_exec('host={i.host} port={i.port} user={i.user} dbname={i.dbname}',
                                    'INSERT INTO sp VALUES (42, 1)');
            ELSIF k = 42 AND current_setting('race.step', true) = '0' THEN
                PERFORM set_config('race.step', '1', false);
            END IF;
            RETURN k;
        END $$""")
    pg.execute("CREATE UNIQUE INDEX sp_k ON sp (racing_key(k))")
    pg.execute("SET race.step = '0'")
    pg.execute("INSERT INTO sp VALUES (42, 99) ON CONFLICT DO NOTHING")
    assert pg.execute("SELECT current_setting('race.step')").fetchone() == ("2",)
    super_deleted = pg.execute("SELECT count(*) FROM heap_page_items(get_raw_page('sp', 0)) "
                               "WHERE t_xmin = '0' AND lp_flags = 1").fetchone()[0]
    assert super_deleted == 1  # the lost speculative tuple is on the page
    assert check(pg, "sp", "y", ["k"]) == 21


def test_inheritance_children_and_partitions_are_read_as_select_reads_them(pg):
    pg.execute("CREATE TABLE parent (y int, x int)")
    pg.execute("INSERT INTO parent SELECT i, 2 * i FROM generate_series(1, 100) i")
    pg.execute("CREATE TABLE child (extra text, x int, y int)")  # another column order ...
    pg.execute("ALTER TABLE child DROP COLUMN extra")  # ... and a dropped column
    pg.execute("ALTER TABLE child INHERIT parent")
    pg.execute("INSERT INTO child SELECT i * 3, -i FROM generate_series(1, 100) i")
    pg.execute("INSERT INTO child SELECT i, -i FROM generate_series(1, 5) i")  # (x, y) by position: x = i, y = -i
    assert check(pg, "parent", "y", ["x"]) == 205
    assert check(pg, "SELECT * FROM ONLY parent", "y", ["x"], paths=("query",)) == 100
    pg.execute("CREATE TABLE part (y int, x int, k int) PARTITION BY RANGE (k)")
    pg.execute("CREATE TABLE part_a PARTITION OF part FOR VALUES FROM (0) TO (50)")
    pg.execute("CREATE TABLE part_b PARTITION OF part FOR VALUES FROM (50) TO (100)")
    pg.execute("INSERT INTO part SELECT i, i % 9, i FROM generate_series(0, 99) i")
    assert check(pg, "part", "y", ["x"]) == 100


def test_materialized_views_and_what_only_the_query_path_reads(pg):
    pg.execute("CREATE TABLE base (y int, x int, n numeric, big float8[])")
    pg.execute("INSERT INTO base SELECT i, i % 10, i / 3, ARRAY(SELECT i % 5 FROM generate_series(1, 600)) "
               "FROM generate_series(1, 50) i")  # 4.8 kB arrays: TOASTed or compressed
    pg.execute("CREATE MATERIALIZED VIEW mv AS SELECT y, x FROM base WHERE y > 10")
    assert check(pg, "mv", "y", ["x"]) == 40
    pg.execute("CREATE MATERIALIZED VIEW empty_mv AS SELECT y, x FROM base WITH NO DATA")
    for reader in ("pages", "query", "auto"):
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="has not been populated"):
            trained(pg, "empty_mv", "y", "x", reader)
    pg.execute("CREATE VIEW v AS SELECT y, x FROM base WHERE y <= 10")
    assert check(pg, "v", "y", ["x"], paths=("query",)) == 10
    assert trained(pg, "v", "y", "x", "auto")[0] == "query"
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="not a table"):
        trained(pg, "v", "y", "x", "pages")
    assert check(pg, "base", "y", ["n"], paths=("query",)) == 50  # numeric: the query path
    assert trained(pg, "base", "y", "n", "auto")[0] == "query"
    # TOAST: the pages arrive, the server finds a value it cannot decode and asks for the query path
    assert check(pg, "base", "y", ["big"], paths=("query",)) == 50
    assert trained(pg, "base", "y", "big", "auto")[:2] == ("query", 50)
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="TOAST"):
        trained(pg, "base", "y", "big", "pages")


def test_columns_added_with_a_default_read_their_default_on_old_rows(pg):
    pg.execute("CREATE TABLE grow (y int)")
    pg.execute("INSERT INTO grow SELECT i FROM generate_series(1, 30) i")
    pg.execute("ALTER TABLE grow ADD COLUMN x int DEFAULT 7")  # atthasmissing: old rows do not store it
    pg.execute("ALTER TABLE grow ADD COLUMN z int")  # NULL on old rows
    pg.execute("ALTER TABLE grow ADD COLUMN v int[] DEFAULT '{1,2}'")
    pg.execute("INSERT INTO grow SELECT i, i, i, ARRAY[i, i] FROM generate_series(31, 40) i")
    assert check(pg, "grow", "y", ["x"]) == 40
    assert check(pg, "grow", "y", ["x", "z"]) == 10
    assert check(pg, "grow", "y", ["v"], paths=("query",)) == 40
    assert trained(pg, "grow", "y", "v", "auto")[0] == "query"  # an array default: the query path


_value = st.one_of(st.none(), st.integers(-1000, 1000))
_row = st.tuples(_value, _value, _value, st.none() | st.lists(st.integers(-1000, 1000), min_size=3, max_size=3))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=200), delete_every=st.integers(0, 5),
       pad=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20))
def test_page_decoder_property(pg, rows, delete_every, pad):
    """Random NULLs, deletes and a variable-length column before the wanted ones."""
    pg.execute("DROP TABLE IF EXISTS h")
    pg.execute("CREATE TABLE h (id serial, s text, y float4, i int4, z float8, v float8[])")
    with pg.cursor().copy("COPY h (s, y, i, z, v) FROM STDIN") as cp:
        for r in rows:
            cp.write_row((pad * (len(rows) % 3),) + r)
    if delete_every:
        pg.execute("DELETE FROM h WHERE id %% %s = 0" % delete_every)
    check(pg, "h", "y", ["i", "z"])
    check(pg, "h", "z", ["v"])
