"""The Strider against its oracle: a plain SELECT under the same imported snapshot.

Raw pages hold every tuple version, so these tests make PostgreSQL leave dead, aborted,
in-progress, HOT-updated, locked and unhinted tuples on the pages, then check that the
Strider returns exactly the rows the SELECT returns (and the same as the COPY path).
"""
from __future__ import annotations

import contextlib

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import make_conninfo

from learnedidx.errors import InDBError
from learnedidx.indb.read import strider
from learnedidx.indb.read.access import check_readable, open_snapshot_session
from learnedidx.indb.read.training_data import read_training_data

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(postgresql):
    postgresql.autocommit = True
    postgresql.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
    i = postgresql.info
    return postgresql, make_conninfo(host=i.host, port=str(i.port), user=i.user, dbname=i.dbname)


@contextlib.contextmanager
def snapshot_session(conninfo):
    """A caller with an open REPEATABLE READ transaction, and a session importing its snapshot."""
    with psycopg.connect(conninfo) as caller:
        caller.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        snap = caller.execute("SELECT pg_export_snapshot()").fetchone()[0]
        sess = open_snapshot_session(conninfo, snapshot=snap, login=None)
        try:
            yield sess
        finally:
            sess.close()


def read(conninfo, table, dep, indep, path="strider"):
    """(strider/copy result, oracle rows) under one snapshot."""
    with snapshot_session(conninfo) as sess:
        rel = check_readable(sess, table, [dep] + indep)
        td = read_training_data(sess, rel, dep, indep, path=path, page_conninfo=conninfo)
        # the cast is exact widening, as on both read paths (float4 0.33333334 -> 0.3333333432674408)
        cols = ", ".join(f"{c}::float8" + ("[]" if rel.types[c].startswith("_") else "") for c in [dep] + indep)
        oracle = sess.execute(f"SELECT {cols} FROM {table}").fetchall()
    return td, oracle


def rows_of(td):
    return sorted(tuple([float(td.y[i])] + [float(v) for v in td.X[i]]) for i in range(len(td.y)))


def oracle_rows(oracle, array):
    """Rows without NULLs (nor NULL elements, nor ragged arrays) from the SELECT."""
    out, skipped = [], 0
    width = None
    for r in oracle:
        feats = list(r[1]) if array and r[1] is not None else (list(r[1:]) if not array else None)
        usable = r[0] is not None and feats is not None and None not in feats and (not array or len(feats) > 0)
        if width is None and array and usable:
            width = len(feats)
        if not usable or (array and len(feats) != width):
            skipped += 1
            continue
        out.append(tuple(float(v) for v in [r[0]] + feats))
    return sorted(out), skipped


def check(conninfo, table, dep, indep, array):
    td, oracle = read(conninfo, table, dep, indep)
    assert td.path == "strider"
    want, skipped = oracle_rows(oracle, array)
    assert td.rows_total == len(oracle)
    assert td.rows_skipped == skipped
    assert rows_of(td) == want
    cp, _ = read(conninfo, table, dep, indep, path="copy")
    assert cp.path == "copy" and rows_of(cp) == want
    return td


def test_types_nulls_dropped_columns_and_alignment(pg):
    db, ci = pg
    db.execute("CREATE TABLE t (a int2, y float8, b text, c int4, d int8, e float4, f float8[], g bool)")
    db.execute("INSERT INTO t SELECT i::int2, i * 0.5, repeat('x', i % 7), i, i::int8 * 1000000000, i / 3.0, "
               "ARRAY[i, -i, i * 0.25], i % 2 = 0 FROM generate_series(1, 3000) i")
    db.execute("UPDATE t SET y = NULL WHERE a % 97 = 0")
    db.execute("UPDATE t SET f = ARRAY[1, NULL, 2]::float8[] WHERE a % 89 = 0")
    db.execute("UPDATE t SET f = NULL WHERE a % 83 = 0")
    db.execute("ALTER TABLE t DROP COLUMN b")  # still occupies space in every stored tuple
    check(ci, "t", "y", ["f"], array=True)
    check(ci, "t", "y", ["a", "c", "d", "e"], array=False)
    check(ci, "t", "d", ["a", "e"], array=False)


def test_long_and_short_array_headers(pg):
    db, ci = pg
    # 10 elements fit a 1-byte varlena header on disk, 40 need a 4-byte one
    db.execute("CREATE TABLE s (y float4, v float8[])")
    db.execute("INSERT INTO s SELECT i, ARRAY(SELECT random() FROM generate_series(1, 10 + i % 1 * 0)) "
               "FROM generate_series(1, 500) i")
    check(ci, "s", "y", ["v"], array=True)
    db.execute("CREATE TABLE l (y int8, v real[])")
    db.execute("INSERT INTO l SELECT i, ARRAY(SELECT (random() * 100)::real FROM generate_series(1, 40)) "
               "FROM generate_series(1, 500) i")
    check(ci, "l", "y", ["v"], array=True)


def test_concurrent_updates_deletes_aborts_hot_and_locks(pg):
    db, ci = pg
    ci += " options='-c lock_timeout=20s'"  # a mistake in the row sets below fails, never hangs
    db.execute("SET lock_timeout = '20s'")
    db.execute("CREATE TABLE m (id int PRIMARY KEY, y float8, x float8)")
    db.execute("INSERT INTO m SELECT i, i, i * 2 FROM generate_series(1, 2000) i")
    db.execute("DELETE FROM m WHERE id % 10 = 0")  # committed delete before the snapshot
    for _ in range(3):  # HOT chains: x is not indexed
        db.execute("UPDATE m SET x = x + 1 WHERE id % 7 = 0")
    with psycopg.connect(ci) as aborted:  # an aborted insert and an aborted update
        aborted.execute("INSERT INTO m SELECT i, -1, -1 FROM generate_series(5001, 5100) i")
        aborted.execute("UPDATE m SET y = -y WHERE id % 5 = 0")
        aborted.rollback()
    running = psycopg.connect(ci)  # in progress when the snapshot is taken, committed after
    running.execute("UPDATE m SET y = y + 0.5 WHERE id % 3 = 0")
    running.execute("SAVEPOINT s")
    running.execute("INSERT INTO m SELECT i, 7, 7 FROM generate_series(6001, 6050) i")
    running.execute("RELEASE s")
    locker = psycopg.connect(ci)
    locker.execute("SELECT * FROM m WHERE id % 11 = 0 AND id % 3 <> 0 FOR UPDATE")
    sharer1, sharer2 = psycopg.connect(ci), psycopg.connect(ci)  # a multixact locker
    shared = "SELECT * FROM m WHERE id % 13 = 0 AND id % 3 <> 0 AND id % 11 <> 0 FOR SHARE"
    sharer1.execute(shared)
    sharer2.execute(shared)
    try:
        with psycopg.connect(ci) as caller:
            caller.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            snap = caller.execute("SELECT pg_export_snapshot()").fetchone()[0]
            running.commit()  # after the snapshot: still invisible to it
            db.execute("DELETE FROM m WHERE id % 4 = 0 AND id % 11 <> 0 AND id % 13 <> 0")  # after the snapshot: visible
            db.execute("INSERT INTO m SELECT i, 9, 9 FROM generate_series(7001, 7100) i")
            sess = open_snapshot_session(ci, snapshot=snap, login=None)
            rel = check_readable(sess, "m", ["y", "x"])
            td = read_training_data(sess, rel, "y", ["x"], path="strider", page_conninfo=ci)
            oracle = sess.execute("SELECT y, x FROM m").fetchall()
            sess.close()
    finally:
        for c in (locker, sharer1, sharer2, running):
            c.close()
    assert td.path == "strider"
    want, skipped = oracle_rows(oracle, array=False)
    assert skipped == 0 and rows_of(td) == want
    assert len(want) == 1800  # 2000 rows minus the 200 deleted before the snapshot


def test_unhinted_tuples_use_the_commit_log(pg):
    db, ci = pg
    db.execute("CREATE TABLE u (y float8, x float8)")
    db.execute("INSERT INTO u SELECT i, i FROM generate_series(1, 1000) i")
    with psycopg.connect(ci) as w:
        w.execute("INSERT INTO u SELECT i, i FROM generate_series(1001, 1100) i")
        w.rollback()
    # Nothing has read the table since: the tuples carry no commit hint bits yet.
    masks = db.execute("SELECT t_infomask FROM heap_page_items(get_raw_page('u', 0))").fetchall()
    assert all(m[0] & strider.HEAP_XMIN_COMMITTED == 0 for m in masks)
    td = check(ci, "u", "y", ["x"], array=False)
    assert len(td.y) == 1000


def test_toasted_values_fall_back_to_copy(pg):
    db, ci = pg
    db.execute("CREATE TABLE big (y float8, v float8[])")
    db.execute("INSERT INTO big SELECT i, ARRAY(SELECT random() FROM generate_series(1, 600)) "
               "FROM generate_series(1, 50) i")  # 4.8 kB arrays are moved out of line or compressed
    with pytest.raises(InDBError, match="Strider cannot read"):
        read(ci, "big", "y", ["v"], path="strider")
    td, oracle = read(ci, "big", "y", ["v"], path="auto")
    assert td.path == "copy" and rows_of(td) == oracle_rows(oracle, array=True)[0]


def test_numeric_and_views_take_the_copy_path(pg):
    db, ci = pg
    db.execute("CREATE TABLE n (y numeric, x float8)")
    db.execute("INSERT INTO n SELECT i, i FROM generate_series(1, 100) i")
    db.execute("CREATE VIEW nv AS SELECT x AS y, x FROM n")
    for table in ("n", "nv"):
        td, oracle = read(ci, table, "y", ["x"], path="auto")
        assert td.path == "copy" and rows_of(td) == oracle_rows(oracle, array=False)[0]


def test_bad_reader_name_is_clear(pg):
    db, ci = pg
    db.execute("CREATE TABLE r (y float8, x float8)")
    with pytest.raises(InDBError, match="reader must be one of"):
        read(ci, "r", "y", ["x"], path="pages")


_value = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False, width=32))
_row = st.tuples(_value, st.none() | st.integers(-2**31, 2**31 - 1), _value,
                 st.none() | st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=0, max_size=40))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=300), delete_every=st.integers(0, 5),
       pad=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20))
def test_page_decoder_property(pg, rows, delete_every, pad):
    """Random NULLs, widths, deletes and a variable-length column before the wanted ones."""
    db, ci = pg
    db.execute("DROP TABLE IF EXISTS h")
    db.execute("CREATE TABLE h (id serial, s text, y float4, i int4, z float8, v float8[])")
    with db.cursor() as cur:
        with cur.copy("COPY h (s, y, i, z, v) FROM STDIN") as cp:
            for r in rows:
                cp.write_row((pad * (len(rows) % 3),) + r)
    if delete_every:
        db.execute("DELETE FROM h WHERE id %% %s = 0" % delete_every)
    check(ci, "h", "y", ["i", "z"], array=False)
    check(ci, "h", "z", ["v"], array=True)


def test_copy_stream_parser_any_chunking():
    """COPY BINARY rows of whole pages land back to back whatever the chunk boundaries."""
    rng = np.random.default_rng(0)
    pages = rng.integers(0, 256, (5, strider.PAGE_SIZE), dtype=np.uint8)
    rows = [pages[:2].tobytes(), pages[2:].tobytes()]
    stream = (b"PGCOPY\n\xff\r\n\x00" + bytes(8) + b"".join(b"\x00\x01" + len(r).to_bytes(4, "big") + r for r in rows)
              + b"\xff\xff")
    for size in (1, 7, 8192, len(stream)):
        out = np.empty(pages.size, np.uint8)
        chunks = [stream[i:i + size] for i in range(0, len(stream), size)]
        assert strider._copy_into(chunks, out) == pages.size
        assert np.array_equal(out.reshape(pages.shape), pages)


def test_page_layout_constants_agree_with_pageinspect(pg):
    """The kernels' named offsets decode a real page as pageinspect's own functions do."""
    db, _ = pg
    db.execute("CREATE TABLE lay (a int4, b float8, c float8[])")
    db.execute("INSERT INTO lay VALUES (1, 0.5, '{1, 2}'), (2, NULL, '{3}'), (NULL, 1.5, NULL)")
    db.execute("DELETE FROM lay WHERE a = 2")
    b = np.frombuffer(db.execute("SELECT get_raw_page('lay', 0)").fetchone()[0], np.uint8)

    def u(pos, n):
        return int.from_bytes(b[pos:pos + n].tobytes(), "little")

    lower, upper, special, pagesize, version = db.execute(
        "SELECT lower, upper, special, pagesize, version FROM page_header(get_raw_page('lay', 0))").fetchone()
    assert (u(strider.PD_LOWER, 2), u(strider.PD_UPPER, 2), u(strider.PD_SPECIAL, 2)) == (lower, upper, special)
    v = u(strider.PD_PAGESIZE_VERSION, 2)
    assert (v & 0xFF00, v & 0xFF) == (pagesize, version) == (strider.PAGE_SIZE, strider.PAGE_LAYOUT_VERSION)
    items = db.execute("SELECT lp, lp_off, lp_flags, lp_len, t_xmax::text::int8, t_infomask2, t_infomask, t_hoff, "
                       "t_bits FROM heap_page_items(get_raw_page('lay', 0)) ORDER BY lp").fetchall()
    assert (lower - strider.SIZE_OF_PAGE_HEADER) // strider.ITEM_ID_SIZE == len(items) == 3
    for lp, off, flags, length, xmax, infomask2, infomask, hoff, bits in items:
        word = u(strider.SIZE_OF_PAGE_HEADER + strider.ITEM_ID_SIZE * (lp - 1), 4)
        assert (word & 0x7FFF, (word >> 15) & 3, word >> 17) == (off, flags, length)
        assert flags == strider.LP_NORMAL
        assert (u(off + strider.T_XMAX, 4), u(off + strider.T_INFOMASK2, 2), u(off + strider.T_INFOMASK, 2),
                u(off + strider.T_HOFF, 1)) == (xmax, infomask2, infomask, hoff)
        assert infomask2 & strider.HEAP_NATTS_MASK == 3
        assert bool(infomask & strider.HEAP_HASNULL) == (bits is not None)
        if bits is not None:  # t_bits as text: one character per attribute, least significant bit first
            stored = u(off + strider.SIZE_OF_HEAP_TUPLE_HEADER, 1)
            assert "".join(str((stored >> a) & 1) for a in range(3)) == bits[:3]
    oids = db.execute("SELECT 'int2'::regtype::oid::int, 'int4'::regtype::oid::int, 'int8'::regtype::oid::int, "
                      "'float4'::regtype::oid::int, 'float8'::regtype::oid::int").fetchone()
    assert oids == (strider.INT2OID, strider.INT4OID, strider.INT8OID, strider.FLOAT4OID, strider.FLOAT8OID)
