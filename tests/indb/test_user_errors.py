"""Every user mistake gets its proper SQLSTATE and a message naming the argument, and the
SQLSTATEs the caller sees for the server's error kinds are those of the one error table
(learnedidx/errors.py)."""
from __future__ import annotations

import contextlib
import json
import socket
import threading

import numpy as np
import psycopg
import pytest

from learnedidx import errors
from learnedidx.server import protocol as P
from tests.indb.conftest import connect, make_role

pytestmark = pytest.mark.postgres

UPDATE = "epochs = 1\ndef acc_s(w, x, y):\n    return y * x\ndef update(w, n, s):\n    return {}\n"


@pytest.fixture
def tab(db):
    db.execute("CREATE TABLE t (y float8, b bool, x float8, f float8[], g float8[], s text)")
    db.execute("INSERT INTO t SELECT i, i % 2 = 0, i % 7, ARRAY[i, i % 3], ARRAY[i % 5, i * i], 'a' "
               "FROM generate_series(1, 40) i")
    return db


MISTAKES = [
    # (call, SQLSTATE, what the message must name)
    ("linregr_train('t', 'm', 'f', 'x')", "42804", 'the label "f" has type double precision'),
    ("linregr_train('t', 'm', 'y', 's')", "42804", 'feature "s" has type text'),
    ("linregr_train('t', 'm', 'y', 'x,')", "42601", "indep lists an empty item"),
    ("linregr_train('t', 'm', 'y', 'ARRAY[]::float8[]')", "22023", "no features to train on"),
    ("linregr_train('t', 'm', 'y', '')", "22023", "indep must not be empty"),
    ("linregr_train('t', '', 'y', 'x')", "22023", "out_table must not be empty"),
    ("linregr_train('SELECT y x FROM t WHERE', 'm', 'y', 'x')", "42601", "syntax error"),
    ("logregr_train('t', 'm', 'b', 'x', max_iter => 0)", "22023", "max_iter must be at least 1"),
    ("logregr_train('t', 'm', 'b', 'x', tolerance => -1)", "22023", "tolerance must be at least 0"),
    ("svm_train('t', 'm', 'b', 'x', lambda => -1)", "22023", "lambda must be at least 0"),
    ("svm_train('t', 'm', 'b', 'x', stepsize => 'NaN')", "22023", "stepsize must be greater than 0"),
    ("svm_train('t', 'm', 'y', 'x')", "22023", "svm needs exactly two label values"),
    ("lmf_train('t', 'm', 'x', 'x', 'y', max_rank => 0)", "22023", "max_rank must be at least 1"),
    ("lmf_train('t', 'm', 'x', 'y / 3', 'y')", "22023", "LMF row and column ids must be integers"),
    ("train('nope', 't', 'y', 'x')", "42704", "unknown algorithm nope"),
    ("train('fp', 't', 'y', 'x', '{\"reader\": \"sideways\"}')", "22023", "reader (learnedidx.reader) must be"),
    ("train('fp', 't', 'y', 'x', '{\"threads\": 0}')", "22023", "threads (learnedidx.threads) must be"),
    ("train('fp', 't', 'y', 'x', '{\"epochs\": \"many\"}')", "22023", "epochs must be an integer"),
    ("train('fp', 't', 'y', 'x', '[1, 2]')", "22023", "params must be a JSON object"),
    ("train('zero', 't', 'y', 'x')", "22012", "update: division by zero"),
    ("train('int_zero', 't', 'y', 'x')", "22012", "update: division by zero"),  # numpy's int64: inf once
    ("train('overflow', 't', 'y', 'x')", "22003", "update: a value out of range"),
    ("train('singular', 't', 'y', 'x')", "38000", "update: Singular matrix"),
    ("train('peek', 't', 'y', 'x')", "42601", "index is out of bounds"),
]


@pytest.mark.parametrize("call,state,match", MISTAKES, ids=[m[0][:60] for m in MISTAKES])
def test_a_user_mistake_gets_its_sqlstate_and_names_the_argument(tab, call, state, match):
    for name, update in (("zero", "w + 1.0 / 0.0"), ("int_zero", "w + 1 / 0"), ("overflow", "w * 10.0 ** 400.0"),
                         ("singular", "solve(outer(s, s) * 0.0, s)"), ("fp", "s")):
        tab.execute("SELECT learnedidx.register_algorithm(%s, %s)", (name, UPDATE.format(update)))
    tab.execute("SELECT learnedidx.register_algorithm('peek', %s)",
                ("epochs = 1\ndef acc_s(w, x, y):\n    return x * x[100000]\ndef update(w, s):\n    return s\n",))
    with pytest.raises(psycopg.Error) as err:
        tab.execute(f"SELECT * FROM learnedidx.{call}")
    assert (err.value.sqlstate, match in str(err.value)) == (state, True), str(err.value)
    assert not any(p in str(err.value) for p in ("plpy.", "spiexceptions.", "Traceback", "Error:"))
    assert tab.execute("SELECT to_regclass('m') IS NULL AND to_regclass('t') IS NOT NULL").fetchone() == (True,)


def test_the_page_reader_forced_on_what_it_cannot_read_says_why(tab):
    tab.execute("CREATE VIEW tv AS SELECT * FROM t")
    tab.execute("SET learnedidx.reader = 'pages'")
    for source, indep, why in (("tv", "x", "not a table"), ("t", "x * 2", "expression"),
                               ("SELECT * FROM t", "x", "the source is a query")):
        with pytest.raises(psycopg.errors.FeatureNotSupported, match=why):
            tab.execute("SELECT * FROM learnedidx.linregr_train(%s, 'm', 'y', %s)", (source, indep))


def test_two_array_columns_and_expressions_are_features_side_by_side(tab):
    rows = tab.execute("SELECT y, f, g FROM t ORDER BY y").fetchall()
    X = np.array([[1.0] + r[1] + r[2] for r in rows])
    y = np.array([r[0] for r in rows])
    coef = tab.execute("SELECT coef FROM learnedidx.linregr_train('t', 'two', 'y', 'f, g')").fetchone()[0]
    np.testing.assert_allclose(coef, np.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-6, atol=1e-9)
    assert tab.execute("SELECT count(learnedidx.predict('two', f || g)) FROM t").fetchone() == (40,)
    assert tab.execute("SELECT learnedidx.predict_table('two', 't', 'two_pred')").fetchone() == (40,)


def test_non_finite_results_are_values_not_cast_failures(tab):
    """An SGD algorithm without a loss, and a diverging LMF, reply NaN / Infinity: they reach
    the output table as float8 NaN and Infinity (once a jsonb cast failed with 22P02)."""
    tab.execute("SELECT learnedidx.register_algorithm('noloss', %s)",
                ("epochs = 3\nlearning_rate = 10.0\ndef gradient(w, x, y):\n    return (dot(w, x) - y) * x * 1e200\n",))
    coef, loss = tab.execute("SELECT coef, loss FROM learnedidx.train('noloss', 't', 'y', 'x')").fetchone()
    assert np.isnan(loss) and not np.all(np.isfinite(coef))
    tab.execute("CREATE TABLE r (u int, i int, v float8)")
    tab.execute("INSERT INTO r SELECT g % 10, g % 7, g FROM generate_series(1, 200) g")
    loss = tab.execute("SELECT loss FROM learnedidx.lmf_train('r', 'r_m', 'u', 'i', 'v', stepsize => 5)").fetchone()[0]
    assert not np.isfinite(loss)
    assert tab.execute("SELECT 'NaN'::float8 = loss OR loss = 'Infinity' FROM r_m").fetchone() == (True,)


def test_offload_of_a_relation_that_is_gone_or_no_table_is_a_user_error(db):
    """_offload's source is a regclass, which holds any OID (a dropped table's): 42P01, not the
    relation cache's XX000; an index is no table (42809)."""
    db.execute("CREATE TABLE gone (y float8, x float8)")
    db.execute("CREATE INDEX gone_y ON gone (y)")
    oid, index = db.execute("SELECT 'gone'::regclass::oid, 'gone_y'::regclass::oid").fetchone()
    call = "SELECT learnedidx._offload('indb.train', '{\"algorithm\": \"linregr\"}', %s::oid::regclass, '{y,x}')"
    with pytest.raises(psycopg.errors.WrongObjectType, match='"gone_y" is an index'):
        db.execute(call, (index,))
    db.execute("DROP TABLE gone")
    with pytest.raises(psycopg.errors.UndefinedTable, match=f"relation with OID {oid} does not exist"):
        db.execute(call, (oid,))


def test_registering_a_name_twice_is_a_duplicate_object(db):
    source = "def gradient(w, x, y):\n    return (dot(w, x) - y) * x\n"
    db.execute("SELECT learnedidx.register_algorithm('twice', %s)", (source,))
    with pytest.raises(psycopg.errors.DuplicateObject, match="algorithm public.twice already exists"):
        db.execute("SELECT learnedidx.register_algorithm('twice', %s)", (source,))


# ------------------------------------------------------------- one table: server kinds and SQLSTATEs
def _kinds_reached(db) -> dict[str, psycopg.Error]:
    """Each kind of the table an in-database caller can meet, provoked through SQL."""
    db.execute("CREATE TABLE k (y float8, x float8, f float8[])")
    db.execute("INSERT INTO k SELECT i, i % 5, array_fill(1.5::float8, ARRAY[2000]) FROM generate_series(1, 30) i")
    db.execute("SELECT learnedidx.register_algorithm('zero', %s)", (UPDATE.format("w + 1.0 / 0.0"),))
    db.execute("SELECT learnedidx.register_algorithm('overflow', %s)", (UPDATE.format("w * 10.0 ** 400.0"),))
    db.execute("SELECT learnedidx.register_algorithm('singular', %s)", (UPDATE.format("solve(outer(s, s) * 0.0, s)"),))
    db.execute("CREATE TABLE taken (i int)")
    calls = {
        errors.TrainingDataError: "SELECT * FROM learnedidx.svm_train('k', 'm', 'y', 'x')",
        errors.ParameterError: "SELECT * FROM learnedidx.svm_train('k', 'm', 'y', 'x', max_iter => 0)",
        errors.DSLError: "SELECT learnedidx.register_algorithm('bad', 'import os')",
        errors.NotSupportedError: "SELECT * FROM learnedidx.train('zero', 'k', 'y', 'x', '{\"grouping_cols\": \"y\"}')",
        errors.DSLRuntimeError: "SELECT * FROM learnedidx.train('singular', 'k', 'y', 'x')",
        errors.DSLDivisionByZeroError: "SELECT * FROM learnedidx.train('zero', 'k', 'y', 'x')",
        errors.DSLOverflowError: "SELECT * FROM learnedidx.train('overflow', 'k', 'y', 'x')",
        errors.TooLargeError: "SELECT * FROM learnedidx.linregr_train('k', 'm', 'y', 'f')",
        errors.BadRequestError: "SELECT learnedidx._offload('indb.train', '{\"algorithm\": \"x\", "
                                "\"dsl_source\": 5}', NULL, NULL, 'SELECT 1::float8, 2::float8')",
        # the SQL functions' own (learnedidx/indb/udf) and indb.register's
        errors.BuiltinNameError: "SELECT learnedidx.register_algorithm('svm', 'def gradient(w, x, y):\n    return x\n')",
        errors.SQLSyntaxError: "SELECT * FROM learnedidx.linregr_train('k', 'm', 'y', 'x,')",
        errors.UndefinedColumnError: "SELECT * FROM learnedidx.linregr_train('k', 'm', 'y', 'x', 'nope')",
        errors.DuplicateColumnError: "SELECT * FROM learnedidx.linregr_train('k', 'm', 'y', 'x', 'r2')",
        errors.DuplicateTableError: "SELECT * FROM learnedidx.linregr_train('k', 'taken', 'y', 'x')",
        errors.NameTooLongError: f"SELECT * FROM learnedidx.linregr_train('k', '{'n' * 60}', 'y', 'x')",
        errors.NotAModelError: "SELECT learnedidx.svm_predict('taken', 'k', 'y', 'scored')",
    }
    got = {}
    for cls, sql in calls.items():
        try:
            r = db.execute(sql).fetchone()[0]
        except psycopg.Error as exc:
            got[cls] = exc.sqlstate
            continue
        # _offload itself returns the reply: the SQL side raises its sqlstate (learnedidx._train)
        got[cls] = json.loads(r)["error"]["sqlstate"]
    # a model's feature expression is its owner's SQL: another role may not evaluate it
    db.execute("SELECT * FROM learnedidx.svm_regression('k', 'km', 'y', 'ARRAY[x]', NULL, NULL, NULL, 'max_iter=1')")
    with connect(db, make_role(db, "not_the_owner")) as other:
        try:
            other.execute("SELECT learnedidx.svm_predict('km', 'k', 'y', 'scored')")
        except psycopg.Error as exc:
            got[errors.InsufficientPrivilegeError] = exc.sqlstate
    return got


def test_the_sqlstates_callers_see_are_the_error_tables(db):
    got = _kinds_reached(db)
    assert got == {cls: cls.sqlstate for cls in got}
    # every kind a training call can end with is covered, but the ones no caller can meet:
    # pages-undecodable (the server reads the query path instead), cancelled (the caller left),
    # unknown-algorithm (SQL resolves names), and the base class
    indb = {c for c in errors._CLASSES.values() if issubclass(c, errors.InDBError)}
    assert indb - set(got) == {errors.PagesUndecodableError, errors.CancelledError, errors.UnknownAlgorithmError}


def test_a_socket_that_breaks_the_protocol_is_08P01_and_one_that_is_silent_08006(db, tmp_path):
    """The backend's own protocol errors take ProtocolError's SQLSTATE; a socket that does not
    answer (PostgreSQL's own, say) is unreachable (ServerUnavailableError's)."""
    db.execute("CREATE TABLE d (y float8, x float8)")
    for greeting, state in ((b"HTTP/1.1 200 OK\r\n\r\n", errors.ProtocolError.sqlstate),
                            (P.encode_binary(P.JSON, b'{"hello": "learnedidx"}') + b"garbage!", errors.ProtocolError.sqlstate),
                            (None, errors.ServerUnavailableError.sqlstate)):
        path = str(tmp_path / f"fake{len(greeting or b'')}.sock")
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(path)
        srv.listen(1)

        def serve() -> None:
            conn, _ = srv.accept()
            with conn, contextlib.suppress(OSError):
                if greeting:
                    conn.sendall(greeting)
                while conn.recv(1 << 16):  # without a greeting the backend gives up after its hello timeout
                    pass

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        db.execute("SELECT set_config('learnedidx.socket', %s, false)", (path,))
        with pytest.raises(psycopg.Error) as err:
            db.execute("SELECT * FROM learnedidx.linregr_train('d', 'd_m', 'y', 'x')")
        assert err.value.sqlstate == state, str(err.value)
        t.join(10)
        srv.close()


def test_a_socket_another_os_user_serves_is_08006_before_anything_is_sent(db):
    """A process of another OS user greeting like the server (where learnedidx.socket points,
    or where another user made the directory of the default path) gets nothing of the caller's
    data: the backend checks the listener's user (SO_PEERCRED) before it reads or sends."""
    from tests.other_user import other_user_dir, wait_received

    d = other_user_dir()
    before = len(wait_received(d, 0))
    db.execute("CREATE TABLE secret (y float8, x float8)")
    db.execute("INSERT INTO secret VALUES (1, 1), (2, 2), (3, 4)")
    db.execute("SELECT set_config('learnedidx.socket', %s, false)", (str(d / "shared" / "accel.sock"),))
    with pytest.raises(psycopg.Error) as err:
        db.execute("SELECT * FROM learnedidx.linregr_train('secret', 'secret_m', 'y', 'x')")
    assert err.value.sqlstate == errors.ServerUnavailableError.sqlstate
    assert "does not run as the database's OS user" in str(err.value)
    assert wait_received(d, before + 1)[before:] == [0]
