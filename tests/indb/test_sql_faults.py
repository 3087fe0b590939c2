"""Faults, privileges and the less common SQL forms, end to end through a real cluster and server.

Oracles: plain SELECTs as the same role, scikit-learn on the same rows, and the catalog.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest
from sklearn.linear_model import LinearRegression

from tests.indb.test_training_sql import _load

pytestmark = pytest.mark.postgres


def _models(db, name: str) -> int:
    return db.execute("SELECT count(*) FROM learnedidx.models WHERE name = %s", (name,)).fetchone()[0]


def _connect(proc, dbname: str, **kw) -> psycopg.Connection:
    return psycopg.connect(host=proc.host, port=proc.port, user=proc.user, dbname=dbname, autocommit=True, **kw)


def test_caller_code_cannot_take_over_the_servers_superuser_session(db, postgresql_proc):
    """A view calling the caller's function runs in the server's read session: it must not be
    able to SET ROLE / SET SESSION AUTHORIZATION to the server's superuser."""
    su = postgresql_proc.user
    db.execute("CREATE ROLE mallory LOGIN")
    db.execute("GRANT CREATE ON SCHEMA public TO mallory")
    db.execute("SET SESSION AUTHORIZATION mallory")
    db.execute("CREATE TABLE mt (y float8, x float8)")
    db.execute("INSERT INTO mt SELECT g, g FROM generate_series(1, 50) g")
    db.execute(f"""CREATE FUNCTION grab(v float8) RETURNS float8 LANGUAGE plpgsql AS $$
        BEGIN
            BEGIN EXECUTE 'SET ROLE {su}'; EXCEPTION WHEN insufficient_privilege THEN NULL; END;
            BEGIN EXECUTE 'SET SESSION AUTHORIZATION {su}'; EXCEPTION WHEN insufficient_privilege THEN NULL; END;
            IF (SELECT rolsuper FROM pg_roles WHERE rolname IN (current_user, session_user) ORDER BY 1 DESC LIMIT 1)
            THEN RAISE EXCEPTION 'escalated to %', current_user; END IF;
            RETURN v;
        END $$""")
    db.execute("CREATE VIEW mv AS SELECT y, grab(x) AS x FROM mt")
    n = db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('mv', 'mv_m', 'y', 'x')").fetchone()[0]
    path, owner = db.execute("SELECT read_path, owner FROM learnedidx.models WHERE name = 'mv_m'").fetchone()
    db.execute("RESET SESSION AUTHORIZATION")
    assert (n, path, owner) == (50, "copy", "mallory")


def test_a_role_that_cannot_log_in_gets_a_clear_error(db):
    db.execute("CREATE ROLE nologin_bob")
    db.execute("CREATE TABLE nb (y float8, x float8)")
    db.execute("GRANT SELECT ON nb TO nologin_bob")
    db.execute("SET SESSION AUTHORIZATION nologin_bob")
    with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match="cannot log in .* nologin_bob"):
        db.execute("SELECT * FROM learnedidx.linregr_train('nb', 'nb_m', 'y', 'x')")
    db.execute("RESET SESSION AUTHORIZATION")
    assert _models(db, "nb_m") == 0


def test_column_privileges_and_forced_row_level_security(db):
    db.execute("CREATE ROLE carol LOGIN")
    db.execute("CREATE TABLE cp (y float8, x float8, z float8)")
    db.execute("INSERT INTO cp SELECT g, g % 7, g % 3 FROM generate_series(1, 60) g")
    db.execute("GRANT SELECT (y, x) ON cp TO carol")
    db.execute("GRANT CREATE ON SCHEMA public TO carol")
    db.execute("SET SESSION AUTHORIZATION carol")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
        db.execute("SELECT * FROM learnedidx.linregr_train('cp', 'cp_m', 'y', 'x, z')")
    assert db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('cp', 'cp_m', 'y', 'x')").fetchone()[0] == 60
    # The owner is subject to its own policy under FORCE: the Strider must not bypass it.
    db.execute("CREATE TABLE own (y float8, x float8)")
    db.execute("INSERT INTO own SELECT g, g % 5 FROM generate_series(1, 40) g")
    db.execute("ALTER TABLE own ENABLE ROW LEVEL SECURITY")
    db.execute("ALTER TABLE own FORCE ROW LEVEL SECURITY")
    db.execute("CREATE POLICY small ON own USING (y <= 25)")
    want = db.execute("SELECT count(*) FROM own").fetchone()[0]
    n = db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('own', 'own_m', 'y', 'x')").fetchone()[0]
    path = db.execute("SELECT read_path FROM learnedidx.models WHERE name = 'own_m'").fetchone()[0]
    db.execute("RESET SESSION AUTHORIZATION")
    assert (n, want, path) == (25, 25, "copy")


def test_row_security_is_checked_as_it_applies_to_the_caller(db):
    """docs/indb.md: row-level security is checked with row_security_active(), not the
    table's relrowsecurity flag: a table with RLS enabled whose policies do not apply to the
    caller (here its owner, without FORCE) is read by the Strider, every row."""
    db.execute("CREATE TABLE rls_owned (y float8, x float8)")
    db.execute("INSERT INTO rls_owned SELECT g, g % 5 FROM generate_series(1, 40) g")
    db.execute("ALTER TABLE rls_owned ENABLE ROW LEVEL SECURITY")
    db.execute("CREATE POLICY nothing ON rls_owned USING (false)")
    n = db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('rls_owned', 'rls_owned_m', 'y', 'x')"
                   ).fetchone()[0]
    path = db.execute("SELECT read_path FROM learnedidx.models WHERE name = 'rls_owned_m'").fetchone()[0]
    assert (n, path) == (40, "strider")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_pg_cancel_backend_leaves_nothing_and_others_are_served(db, postgresql_proc, accel_server):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(20000, 10))
    _load(db, "cbig", X, (X[:, 0] > 0).astype(float))
    dbname = db.info.dbname
    errors: list[BaseException] = []

    def train() -> None:
        with _connect(postgresql_proc, dbname) as c:
            try:
                c.execute("SELECT * FROM learnedidx.svm_train('cbig', 'cbig_svm', 'y', 'features', max_iter => 100000)")
            except psycopg.Error as exc:
                errors.append(exc)

    with _connect(postgresql_proc, dbname) as victim_probe:
        t = threading.Thread(target=train)
        t.start()
        pid = None
        for _ in range(200):  # wait until the training call is running
            row = victim_probe.execute("SELECT pid FROM pg_stat_activity WHERE query LIKE '%svm_train(%' "
                                       "AND state = 'active' AND pid <> pg_backend_pid()").fetchone()
            if row:
                pid = row[0]
                break
            time.sleep(0.05)
        assert pid is not None
        time.sleep(0.5)
        # meanwhile the server serves another caller
        X2 = rng.normal(size=(300, 3))
        _load(db, "small", X2, X2 @ [1.0, 2.0, 3.0] + 4.0)
        coef = db.execute("SELECT coef FROM learnedidx.linregr_train('small', 'small_m', 'y', 'features')").fetchone()[0]
        np.testing.assert_allclose(coef, [4.0, 1.0, 2.0, 3.0], atol=1e-8)
        assert victim_probe.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone()[0]
        t.join(30)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.QueryCanceled)
    assert _models(db, "cbig_svm") == 0
    assert db.execute("SELECT to_regclass('cbig_svm')").fetchone()[0] is None
    time.sleep(1.0)  # the server notices within half a second and stops training
    before = _cpu_seconds(accel_server.pid)
    time.sleep(1.0)
    assert _cpu_seconds(accel_server.pid) - before < 0.5  # two busy engine threads would burn ~2 s


PLAIN = "CREATE TABLE f (y float8, x float8)"


@pytest.mark.parametrize("setup,call,error,match", [
    ("CREATE TABLE f (y float8, x float8); INSERT INTO f VALUES (NULL, 1), (2, NULL), (NULL, NULL)",
     "linregr_train('f', 'f_m', 'y', 'x')", psycopg.errors.InvalidParameterValue, "no rows"),
    ("CREATE TABLE f (y float8, x float8); INSERT INTO f VALUES (1, 'Infinity'), (2, 3)",
     "linregr_train('f', 'f_m', 'y', 'x')", psycopg.errors.InvalidParameterValue, "infinite"),
    ("CREATE TABLE f (y float8, x float8[]); INSERT INTO f VALUES (1, '{1,-Infinity}'), (0, '{2,3}')",
     "logregr_train('f', 'f_m', 'y', 'x')", psycopg.errors.InvalidParameterValue, "infinite"),
    ("CREATE TEMP TABLE f (y float8, x float8)",
     "linregr_train('f', 'f_m', 'y', 'x')", psycopg.errors.FeatureNotSupported, "temporary table"),
    (PLAIN,
     "logregr_train('f', 'f_m', 'y', 'x', grouping_cols => 'x')", psycopg.errors.FeatureNotSupported, "grouping"),
    (PLAIN,
     "logregr_train('f', 'f_m', 'y', 'x', optimizer => 'cg')", psycopg.errors.InvalidParameterValue, "optimizer"),
    (PLAIN,
     "linregr_train('SELECT y, x FROM nowhere', 'f_m', 'y', 'x')", psycopg.errors.UndefinedTable, "nowhere"),
    (PLAIN,
     "linregr_train('SELECT y FROM f; DROP TABLE f', 'f_m', 'y', 'y')", psycopg.Error, "source query"),
    (PLAIN,
     "train('no_such_alg', 'f', 'y', 'x')", psycopg.errors.UndefinedObject, "unknown algorithm"),
])
def test_bad_input_is_a_clear_error_and_leaves_no_model(db, setup, call, error, match):
    db.execute(setup)
    with pytest.raises(error, match=match):
        db.execute(f"SELECT * FROM learnedidx.{call}")
    assert _models(db, "f_m") == 0 and db.execute("SELECT to_regclass('f')").fetchone()[0] is not None


def test_query_source_and_madlib_intercept_forms(db):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 2))
    y = X @ [2.0, -1.0] + 0.5 + rng.normal(scale=0.1, size=400)
    _load(db, "q", X, y, array=False)
    sub = db.execute("SELECT x0, x1, y FROM q WHERE id <= 300 ORDER BY id").fetchall()
    Xs, ys = np.array([r[:2] for r in sub]), np.array([r[2] for r in sub])
    coef = db.execute("SELECT coef FROM learnedidx.linregr_train('SELECT * FROM q WHERE id <= 300', 'q_m', 'y', "
                      "'x0, x1')").fetchone()[0]
    sk = LinearRegression().fit(Xs, ys)
    np.testing.assert_allclose(coef, np.r_[sk.intercept_, sk.coef_], rtol=1e-8)
    assert db.execute("SELECT read_path FROM learnedidx.models WHERE name = 'q_m'").fetchone()[0] == "copy"
    # MADlib's ARRAY[1, ...] states the intercept; ARRAY[...] without the 1 fits none.
    a = db.execute("SELECT coef FROM learnedidx.linregr_train('q', 'q_a1', 'y', 'ARRAY[1, x0, x1]')").fetchone()[0]
    b = db.execute("SELECT coef FROM learnedidx.linregr_train('q', 'q_a0', 'y', 'array[x0,x1]')").fetchone()[0]
    sk_all = LinearRegression().fit(X, y)
    sk_none = LinearRegression(fit_intercept=False).fit(X, y)
    np.testing.assert_allclose(a, np.r_[sk_all.intercept_, sk_all.coef_], rtol=1e-8)
    np.testing.assert_allclose(b, sk_none.coef_, rtol=1e-8)
    assert db.execute("SELECT indep FROM learnedidx.models WHERE name = 'q_a1'").fetchone()[0] == ["x0", "x1"]
    # DAnA-style tables carry the intercept as a leading 1 in the features: no second one is added.
    _load(db, "dana", np.c_[np.ones(400), X], y)
    c = db.execute("SELECT coef FROM learnedidx.linregr_train('dana', 'dana_m', 'y', 'features')").fetchone()[0]
    np.testing.assert_allclose(c, a, rtol=1e-8)
    p = db.execute("SELECT learnedidx.predict('dana_m', features) FROM dana WHERE id = 1").fetchone()[0]
    assert p == pytest.approx(sk_all.predict(X[:1])[0], rel=1e-8)


def test_predict_errors_lmf_predict_and_drop_model(db):
    db.execute("INSERT INTO learnedidx.models (name, algorithm, source, dep, indep, coef) VALUES "
               "('lin3', 'linregr', 't', 'y', '{a,b}', '{1, 2, 3}')")
    db.execute("INSERT INTO learnedidx.models (name, algorithm, source, dep, indep, u, v) VALUES "
               "('mf', 'lmf', 'r', 'v', '{r,c}', '{{1,2},{3,4}}', '{{5,6},{7,8},{9,10}}')")
    assert db.execute("SELECT learnedidx.predict('lin3', '{10, 100}')").fetchone()[0] == 1 + 20 + 300
    assert db.execute("SELECT learnedidx.predict('lin3', '{10, NULL}')").fetchone()[0] is None
    assert db.execute("SELECT learnedidx.predict('lin3', NULL)").fetchone()[0] is None
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="3 coefficients; 4 features"):
        db.execute("SELECT learnedidx.predict('lin3', '{1, 2, 3, 4}')")
    with pytest.raises(psycopg.errors.UndefinedObject, match="no model named nope"):
        db.execute("SELECT learnedidx.predict('nope', '{1, 2}')")
    with pytest.raises(psycopg.errors.WrongObjectType, match="logistic"):
        db.execute("SELECT learnedidx.predict_proba('lin3', '{1, 2}')")
    u, v = np.array([[1, 2], [3, 4]]), np.array([[5, 6], [7, 8], [9, 10]])
    got = db.execute("SELECT learnedidx.predict('mf', ARRAY[r, c]) FROM generate_series(0, 1) r, "
                     "generate_series(0, 2) c ORDER BY r, c").fetchall()
    assert [g[0] for g in got] == (u @ v.T).ravel().tolist()
    assert db.execute("SELECT learnedidx.predict('mf', '{5, 0}')").fetchone()[0] is None  # unseen row id
    # drop_model: only the owner, and it removes the output table too
    db.execute("CREATE TABLE lin3 (coef float8[])")
    db.execute("CREATE ROLE dave LOGIN")
    db.execute("SET SESSION AUTHORIZATION dave")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="another role"):
        db.execute("SELECT learnedidx.drop_model('lin3')")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # nor forge a row owned by someone else
        db.execute("INSERT INTO learnedidx.models (name, algorithm, source, indep, owner) "
                   "VALUES ('forged', 'linregr', 't', '{a}', %s)", (db.info.user,))
    db.execute("RESET SESSION AUTHORIZATION")
    db.execute("SELECT learnedidx.drop_model('lin3')")
    assert _models(db, "lin3") == 0 and db.execute("SELECT to_regclass('lin3')").fetchone()[0] is None
    with pytest.raises(psycopg.errors.UndefinedObject):
        db.execute("SELECT learnedidx.drop_model('lin3')")
