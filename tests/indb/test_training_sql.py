"""End to end: SQL training functions → PL/Python → accelerator server → snapshot read → engine.

Oracles: scikit-learn on the same data, and plain SELECTs for what the server read.
"""
from __future__ import annotations

import threading

import numpy as np
import psycopg
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

pytestmark = pytest.mark.postgres


def _load(conn, table, X, y, array=True):
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    if array:
        conn.execute(f"CREATE TABLE {table} (id serial, y float8, features float8[])")
        with conn.cursor() as cur:
            with cur.copy(f"COPY {table} (y, features) FROM STDIN") as cp:
                for xi, yi in zip(X, y):
                    cp.write_row((float(yi), [float(v) for v in xi]))
    else:
        cols = ", ".join(f"x{i} float8" for i in range(X.shape[1]))
        conn.execute(f"CREATE TABLE {table} (id serial, y float8, {cols})")
        names = ", ".join(f"x{i}" for i in range(X.shape[1]))
        with conn.cursor() as cur:
            with cur.copy(f"COPY {table} (y, {names}) FROM STDIN") as cp:
                for xi, yi in zip(X, y):
                    cp.write_row((float(yi), *map(float, xi)))


def test_linregr_matches_sklearn_on_diabetes(db):
    X, y = load_diabetes(return_X_y=True)
    _load(db, "diabetes", X, y)
    row = db.execute("SELECT coef, num_rows_processed, num_rows_skipped FROM "
                     "learnedidx.linregr_train('diabetes', 'diabetes_model', 'y', 'features')").fetchone()
    sk = LinearRegression().fit(X, y)
    np.testing.assert_allclose(row[0], np.r_[sk.intercept_, sk.coef_], rtol=1e-6, atol=1e-6)
    assert row[1:] == (442, 0)
    out = db.execute("SELECT coef, num_rows_processed FROM diabetes_model").fetchone()
    np.testing.assert_allclose(out[0], row[0])
    cat = db.execute("SELECT algorithm, source, dep, indep, owner, read_path FROM learnedidx.models "
                     "WHERE name = 'diabetes_model'").fetchone()
    assert cat[:4] == ("linregr", "diabetes", "y", ["features"]) and cat[5] == "strider"
    pred = db.execute("SELECT learnedidx.predict('diabetes_model', features) FROM diabetes ORDER BY id").fetchall()
    np.testing.assert_allclose([p[0] for p in pred], sk.predict(X), rtol=1e-6)


def test_logregr_with_column_list_matches_sklearn(db):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 4))
    y = (rng.random(3000) < 1 / (1 + np.exp(-(0.3 + X @ [1.0, -2.0, 0.5, 0.0])))).astype(float)
    _load(db, "patients", X, y, array=False)
    coef = db.execute("SELECT coef FROM learnedidx.logregr_train('patients', 'patients_model', 'y', "
                      "'x0, x1, x2, x3', max_iter => 50)").fetchone()[0]
    sk = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10000).fit(X, y)
    np.testing.assert_allclose(coef, np.r_[sk.intercept_, sk.coef_[0]], rtol=1e-4, atol=1e-4)
    probs = db.execute("SELECT learnedidx.predict_proba('patients_model', ARRAY[x0, x1, x2, x3]) "
                       "FROM patients ORDER BY id").fetchall()
    np.testing.assert_allclose([p[0] for p in probs], sk.predict_proba(X)[:, 1], atol=1e-4)
    n = db.execute("SELECT learnedidx.predict_table('patients_model', 'patients', 'patients_pred')").fetchone()[0]
    assert n == 3000
    agree = db.execute("SELECT avg((prediction = y)::int) FROM patients_pred").fetchone()[0]
    assert float(agree) == pytest.approx((sk.predict(X) == y).mean(), abs=1e-3)


def test_svm_on_breast_cancer(db):
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    _load(db, "cancer", X, y)
    db.execute("SELECT * FROM learnedidx.svm_train('cancer', 'cancer_svm', 'y', 'features', max_iter => 40)")
    pred = np.array([r[0] for r in db.execute(
        "SELECT learnedidx.predict('cancer_svm', features) FROM cancer ORDER BY id").fetchall()])
    sk = LinearSVC(C=1.0, max_iter=20000).fit(X, y)
    assert (pred == y).mean() >= 0.96
    assert (pred == sk.predict(X)).mean() >= 0.95


def test_lmf_recovers_low_rank_matrix(db):
    rng = np.random.default_rng(1)
    U, V = rng.normal(size=(60, 3)), rng.normal(size=(40, 3))
    r, c = np.divmod(rng.choice(60 * 40, 1800, replace=False), 40)
    vals = (U @ V.T)[r, c]
    db.execute("CREATE TABLE ratings (userid int, itemid int, rating float8)")
    with db.cursor() as cur:
        with cur.copy("COPY ratings FROM STDIN") as cp:
            for a, b, v in zip(r, c, vals):
                cp.write_row((int(a), int(b), float(v)))
    rmse = db.execute("SELECT loss FROM learnedidx.lmf_train('ratings', 'ratings_lmf', 'userid', 'itemid', 'rating', "
                      "max_rank => 3, stepsize => 0.05, lambda => 0.001, num_iterations => 300)").fetchone()[0]
    u, v = db.execute("SELECT u, v FROM ratings_lmf").fetchone()
    approx = (np.array(u) @ np.array(v).T)[r, c]
    assert rmse < 0.15 * vals.std()
    assert np.sqrt(np.mean((approx - vals) ** 2)) == pytest.approx(rmse, rel=0.5)


def test_null_rows_are_skipped_and_counted(db):
    db.execute("CREATE TABLE withnulls (y float8, a float8, b float8)")
    db.execute("INSERT INTO withnulls SELECT g, g * 2, CASE WHEN g % 5 = 0 THEN NULL ELSE g END FROM generate_series(1, 100) g")
    db.execute("INSERT INTO withnulls VALUES (NULL, 1, 1)")
    row = db.execute("SELECT num_rows_processed, num_rows_skipped FROM "
                     "learnedidx.linregr_train('withnulls', 'withnulls_m', 'y', 'a, b')").fetchone()
    assert row == (80, 21)


def test_training_sees_exactly_the_callers_snapshot(db, postgresql_proc):
    db.execute("CREATE TABLE snap (y float8, x float8)")
    db.execute("INSERT INTO snap SELECT g, g FROM generate_series(1, 500) g")
    db.autocommit = False
    db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    seen = db.execute("SELECT count(*) FROM snap").fetchone()[0]
    with psycopg.connect(host=postgresql_proc.host, port=postgresql_proc.port, user=postgresql_proc.user,
                         dbname=db.info.dbname, autocommit=True) as other:
        other.execute("INSERT INTO snap SELECT g, g FROM generate_series(1, 300) g")
        other.execute("DELETE FROM snap WHERE y < 50")
    n = db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('snap', 'snap_m', 'y', 'x')").fetchone()[0]
    db.execute("COMMIT")
    db.autocommit = True
    assert n == seen == 500
    assert db.execute("SELECT count(*) FROM snap").fetchone()[0] == 500 + 300 - 49 - 49


def test_uncommitted_writes_in_the_calling_transaction_are_refused(db):
    db.execute("CREATE TABLE mine (y float8, x float8)")
    db.autocommit = False
    db.execute("INSERT INTO mine VALUES (1, 1), (2, 2)")
    with pytest.raises(psycopg.Error, match="already written"):
        db.execute("SELECT * FROM learnedidx.linregr_train('mine', 'mine_m', 'y', 'x')")
    db.rollback()
    db.autocommit = True


@pytest.mark.parametrize("call,match", [
    ("learnedidx.linregr_train('nope', 'm1', 'y', 'x')", "does not exist"),
    ("learnedidx.linregr_train('t_err', 'm2', 'y', 'nocol')", "does not exist"),
    ("learnedidx.linregr_train('t_err', 'm3', 'y', 'label')", "type text"),
    ("learnedidx.linregr_train('t_empty', 'm4', 'y', 'x')", "no rows"),
    ("learnedidx.linregr_train('t_nan', 'm5', 'y', 'x')", "NaN"),
    ("learnedidx.logregr_train('t_err', 'm6', 'y', 'x')", "0/1"),
])
def test_bad_input_gives_clear_errors_and_no_model(db, call, match):
    db.execute("CREATE TABLE IF NOT EXISTS t_err (y float8, x float8, label text)")
    db.execute("INSERT INTO t_err VALUES (5, 1, 'a'), (7, 2, 'b')")
    db.execute("CREATE TABLE IF NOT EXISTS t_empty (y float8, x float8)")
    db.execute("CREATE TABLE IF NOT EXISTS t_nan (y float8, x float8)")
    db.execute("INSERT INTO t_nan VALUES (1, 'NaN'), (2, 3)")
    with pytest.raises(psycopg.Error, match=match):
        db.execute(f"SELECT * FROM {call}")
    assert db.execute("SELECT count(*) FROM learnedidx.models").fetchone()[0] == 0


def test_permission_denied_and_row_level_security(db):
    db.execute("CREATE TABLE secret (y float8, x float8, owner text)")
    db.execute("INSERT INTO secret SELECT g, g, CASE WHEN g <= 30 THEN 'alice' ELSE 'bob' END FROM generate_series(1, 100) g")
    db.execute("CREATE ROLE alice LOGIN")
    db.execute("GRANT CREATE ON SCHEMA public TO alice")
    db.execute("SET SESSION AUTHORIZATION alice")
    with pytest.raises(psycopg.Error, match="permission denied"):
        db.execute("SELECT * FROM learnedidx.linregr_train('secret', 'alice_m', 'y', 'x')")
    db.execute("RESET SESSION AUTHORIZATION")
    db.execute("GRANT SELECT ON secret TO alice")
    db.execute("ALTER TABLE secret ENABLE ROW LEVEL SECURITY")
    db.execute("CREATE POLICY mine ON secret FOR SELECT USING (owner = current_user)")
    db.execute("SET SESSION AUTHORIZATION alice")
    n = db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('secret', 'alice_m', 'y', 'x')").fetchone()[0]
    db.execute("RESET SESSION AUTHORIZATION")
    assert n == 30


def test_server_down_names_the_socket(db):
    db.execute("SET learnedidx.socket = '/tmp/no-such-dir/accel.sock'")
    with pytest.raises(psycopg.Error, match="/tmp/no-such-dir/accel.sock"):
        db.execute("SELECT * FROM learnedidx.linregr_train('t', 'mm', 'y', 'x')")


def test_statement_timeout_cancels_cleanly_and_server_keeps_serving(db):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20000, 10))
    _load(db, "big", X, (X[:, 0] > 0).astype(float))
    db.execute("SET statement_timeout = '700ms'")
    with pytest.raises(psycopg.errors.QueryCanceled):
        db.execute("SELECT * FROM learnedidx.svm_train('big', 'big_svm', 'y', 'features', max_iter => 100000)")
    db.execute("SET statement_timeout = 0")
    assert db.execute("SELECT count(*) FROM learnedidx.models WHERE name = 'big_svm'").fetchone()[0] == 0
    assert db.execute("SELECT to_regclass('big_svm')").fetchone()[0] is None
    X2, y2 = load_diabetes(return_X_y=True)
    _load(db, "after", X2, y2)
    assert db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('after', 'after_m', 'y', 'features')").fetchone()[0] == 442


DSL_LOGREG = """
epochs = 40
learning_rate = 0.5
batch_size = 16
def gradient(w, x, y):
    return (sigmoid(dot(w, x)) - y) * x
def loss(w, x, y):
    p = sigmoid(dot(w, x))
    return -(y * log(p + 1e-12) + (1 - y) * log(1 - p + 1e-12))
"""


def test_dsl_algorithm_registered_from_sql_and_python(db, postgresql_proc):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 3))
    y = (rng.random(2000) < 1 / (1 + np.exp(-(X @ [1.5, -1.0, 0.5])))).astype(float)
    _load(db, "dsl_data", X, y)
    db.execute("SELECT learnedidx.register_algorithm('my_logregr', %s)", (DSL_LOGREG,))
    coef = db.execute("SELECT coef FROM learnedidx.train('my_logregr', 'dsl_data', 'y', 'features')").fetchone()[0]
    builtin = db.execute("SELECT coef FROM learnedidx.logregr_train('dsl_data', 'dsl_ref', 'y', 'features')").fetchone()[0]
    np.testing.assert_allclose(coef, builtin, atol=0.15)
    with pytest.raises(psycopg.Error, match="not allowed"):
        db.execute("SELECT learnedidx.register_algorithm('evil', 'import os')")
    import sqlalchemy

    import learnedidx.indb

    eng = sqlalchemy.create_engine(
        f"postgresql+psycopg://{postgresql_proc.user}@/{db.info.dbname}?host={postgresql_proc.host}&port={postgresql_proc.port}")
    learnedidx.indb.register(eng, "my_logregr2", DSL_LOGREG)
    learnedidx.indb.register(db, "my_logregr3", DSL_LOGREG)
    names = {r[0] for r in db.execute("SELECT name FROM learnedidx.algorithms").fetchall()}
    assert {"my_logregr", "my_logregr2", "my_logregr3"} <= names
    eng.dispose()


def test_strider_and_copy_paths_train_the_same_model(db):
    X, y = load_diabetes(return_X_y=True)
    _load(db, "diab2", X, y)
    db.execute("DELETE FROM diab2 WHERE id % 10 = 0")  # dead tuples on the pages
    coefs = {}
    for reader in ("strider", "copy"):
        db.execute(f"SET learnedidx.reader = '{reader}'")
        coefs[reader] = db.execute(f"SELECT coef, num_rows_processed FROM learnedidx.linregr_train("
                                   f"'diab2', 'diab2_{reader}', 'y', 'features')").fetchone()
        path = db.execute("SELECT read_path FROM learnedidx.models WHERE name = %s", (f"diab2_{reader}",)).fetchone()
        assert path == (reader,)
    db.execute("RESET learnedidx.reader")
    assert coefs["strider"][1] == coefs["copy"][1] == 442 - 44
    np.testing.assert_allclose(coefs["strider"][0], coefs["copy"][0], rtol=1e-9)
    db.execute("SET learnedidx.reader = 'pages'")
    with pytest.raises(psycopg.Error, match="reader must be one of"):
        db.execute("SELECT * FROM learnedidx.linregr_train('diab2', 'diab2_bad', 'y', 'features')")
    db.execute("RESET learnedidx.reader")
    assert db.execute("SELECT count(*) FROM learnedidx.models WHERE name = 'diab2_bad'").fetchone() == (0,)
