"""End to end: the SQL training functions → the backend streams the caller's rows → the server
trains → the model tables.  Oracles: scikit-learn on the same rows, plain SELECTs."""
from __future__ import annotations

import numpy as np
import psycopg
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from tests.indb.conftest import connect, load

pytestmark = pytest.mark.postgres


def test_linregr_matches_sklearn_and_the_model_is_its_tables(db):
    X, y = load_diabetes(return_X_y=True)
    load(db, "diabetes", X, y)
    row = db.execute("SELECT coef, num_rows_processed, num_rows_skipped FROM "
                     "learnedidx.linregr_train('diabetes', 'diabetes_model', 'y', 'features')").fetchone()
    sk = LinearRegression().fit(X, y)
    np.testing.assert_allclose(row[0], np.r_[sk.intercept_, sk.coef_], rtol=1e-6, atol=1e-6)
    assert row[1:] == (442, 0)
    out = db.execute("SELECT coef, num_rows_processed FROM diabetes_model").fetchone()
    np.testing.assert_allclose(out[0], row[0])
    summary = db.execute("SELECT method, source_table, out_table, dependent_varname, independent_varname, "
                         "intercept, num_features, read_path FROM diabetes_model_summary").fetchone()
    assert summary == ("linregr", "diabetes", "public.diabetes_model", "y", "features", True, 10, "pages")
    listed = db.execute("SELECT model::text, algorithm, read_path FROM learnedidx.models").fetchall()
    assert listed == [("diabetes_model", "linregr", "pages")]
    pred = db.execute("SELECT learnedidx.predict('diabetes_model', features) FROM diabetes ORDER BY id").fetchall()
    np.testing.assert_allclose([p[0] for p in pred], sk.predict(X), rtol=1e-6)


def test_logregr_with_column_list_matches_sklearn(db):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 4))
    y = (rng.random(3000) < 1 / (1 + np.exp(-(0.3 + X @ [1.0, -2.0, 0.5, 0.0])))).astype(float)
    load(db, "patients", X, y, array=False)
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
    load(db, "cancer", X, y)
    db.execute("SELECT * FROM learnedidx.svm_train('cancer', 'cancer_svm', 'y', 'features', max_iter => 40)")
    pred = np.array([r[0] for r in db.execute(
        "SELECT learnedidx.predict('cancer_svm', features) FROM cancer ORDER BY id").fetchall()])
    sk = LinearSVC(C=1.0, max_iter=20000).fit(X, y)
    assert (pred == y).mean() >= 0.96
    assert (pred == sk.predict(X)).mean() >= 0.95
    assert db.execute("SELECT dep_var_mapping FROM cancer_svm").fetchone()[0] == [0.0, 1.0]


def test_lmf_recovers_low_rank_matrix(db):
    rng = np.random.default_rng(1)
    U, V = rng.normal(size=(60, 3)), rng.normal(size=(40, 3))
    r, c = np.divmod(rng.choice(60 * 40, 1800, replace=False), 40)
    vals = (U @ V.T)[r, c]
    db.execute("CREATE TABLE ratings (userid int, itemid int, rating float8)")
    with db.cursor().copy("COPY ratings FROM STDIN") as cp:
        for a, b, v in zip(r, c, vals):
            cp.write_row((int(a), int(b), float(v)))
    rmse = db.execute("SELECT loss FROM learnedidx.lmf_train('ratings', 'ratings_lmf', 'userid', 'itemid', 'rating', "
                      "max_rank => 3, stepsize => 0.05, lambda => 0.001, num_iterations => 300)").fetchone()[0]
    pred = np.array([p[0] for p in db.execute(
        "SELECT learnedidx.predict('ratings_lmf', ARRAY[userid, itemid]) FROM ratings").fetchall()])
    truth = np.array([t[0] for t in db.execute("SELECT rating FROM ratings").fetchall()])
    assert rmse < 0.15 * vals.std()
    assert np.sqrt(np.mean((pred - truth) ** 2)) == pytest.approx(rmse, rel=0.5)
    assert db.execute("SELECT learnedidx.predict('ratings_lmf', ARRAY[999, 0])").fetchone()[0] is None  # unseen


def test_null_rows_are_skipped_and_counted(db):
    db.execute("CREATE TABLE withnulls (y float8, a float8, b float8, v float8[])")
    db.execute("INSERT INTO withnulls SELECT g, g * 2, CASE WHEN g % 5 = 0 THEN NULL ELSE g END, "
               "ARRAY[g, CASE WHEN g % 7 = 0 THEN NULL ELSE g END] FROM generate_series(1, 100) g")
    db.execute("INSERT INTO withnulls VALUES (NULL, 1, 1, '{1,1}')")
    for reader in ("pages", "query"):
        db.execute(f"SET learnedidx.reader = '{reader}'")
        scalars = db.execute("SELECT num_rows_processed, num_rows_skipped FROM "
                             f"learnedidx.linregr_train('withnulls', 'wn_{reader}', 'y', 'a, b')").fetchone()
        arrays = db.execute("SELECT num_rows_processed, num_rows_skipped FROM "
                            f"learnedidx.linregr_train('withnulls', 'wa_{reader}', 'y', 'v')").fetchone()
        assert (scalars, arrays) == ((80, 21), (86, 15))


def test_both_paths_train_the_same_model_and_say_which_read(db):
    X, y = load_diabetes(return_X_y=True)
    load(db, "diab2", X, y)
    db.execute("DELETE FROM diab2 WHERE id % 10 = 0")  # dead tuples on the pages
    coefs = {}
    for reader in ("pages", "query"):
        db.execute(f"SET learnedidx.reader = '{reader}'")
        coefs[reader] = db.execute(f"SELECT coef, num_rows_processed FROM learnedidx.linregr_train("
                                   f"'diab2', 'diab2_{reader}', 'y', 'features')").fetchone()
        path = db.execute(f"SELECT read_path FROM diab2_{reader}_summary").fetchone()[0]
        assert path == reader
    db.execute("RESET learnedidx.reader")
    assert coefs["pages"][1] == coefs["query"][1] == 442 - 44
    np.testing.assert_allclose(coefs["pages"][0], coefs["query"][0], rtol=1e-9)
    db.execute("SELECT * FROM learnedidx.linregr_train('diab2', 'diab2_auto', 'y', 'features')")
    assert db.execute("SELECT read_path FROM diab2_auto_summary").fetchone()[0] == "pages"


def test_training_sees_exactly_the_callers_snapshot(db):
    db.execute("CREATE TABLE snap (y float8, x float8)")
    db.execute("INSERT INTO snap SELECT g, g FROM generate_series(1, 500) g")
    db.autocommit = False
    db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    seen = db.execute("SELECT count(*) FROM snap").fetchone()[0]
    with connect(db) as other:
        other.execute("INSERT INTO snap SELECT g, g FROM generate_series(1, 300) g")
        other.execute("DELETE FROM snap WHERE y < 50")
    n = db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('snap', 'snap_m', 'y', 'x')").fetchone()[0]
    db.execute("COMMIT")
    db.autocommit = True
    assert n == seen == 500
    assert db.execute("SELECT count(*) FROM snap").fetchone()[0] == 500 + 300 - 49 - 49


@pytest.mark.parametrize("call,error,match", [
    ("linregr_train('nope', 'm1', 'y', 'x')", psycopg.errors.UndefinedTable, "does not exist"),
    ("linregr_train('t_err', 'm2', 'y', 'nocol')", psycopg.errors.UndefinedColumn, "nocol"),
    ("linregr_train('t_err', 'm3', 'y', 'label')", psycopg.errors.DatatypeMismatch, "type text"),
    ("linregr_train('t_err', 'm3', 'v', 'x')", psycopg.errors.DatatypeMismatch, "label"),
    ("linregr_train('t_empty', 'm4', 'y', 'x')", psycopg.errors.InvalidParameterValue, "no rows"),
    ("linregr_train('t_nan', 'm5', 'y', 'x')", psycopg.errors.InvalidParameterValue, "NaN"),
    ("linregr_train('t_err', 'm6', '', 'x')", psycopg.errors.InvalidParameterValue, "dep must not be empty"),
    ("linregr_train('t_err', 'm6', 'y', ' ')", psycopg.errors.InvalidParameterValue, "indep must not be empty"),
    ("linregr_train('SELECT y, x FROM t_err WHERE', 'm7', 'y', 'x')", psycopg.errors.SyntaxError, "syntax"),
    ("linregr_train('SELECT y, x FROM nowhere', 'm7', 'y', 'x')", psycopg.errors.UndefinedTable, "nowhere"),
    ("linregr_train('SELECT y FROM t_err; DROP TABLE t_err', 'm7', 'y', 'y')", psycopg.errors.SyntaxError,
     'syntax error at or near ";"'),
    ("logregr_train('t_err', 'm8', 'y', 'x')", psycopg.errors.InvalidParameterValue, "0/1"),
    ("logregr_train('t_err', 'm8', 'y', 'x', optimizer => 'sgd')", psycopg.errors.InvalidParameterValue, "optimizer"),
    ("logregr_train('t_err', 'm8', 'y', 'x', grouping_cols => 'nocol')", psycopg.errors.UndefinedColumn,
     "nocol"),
    ("train('no_such_alg', 't_err', 'y', 'x')", psycopg.errors.UndefinedObject, "unknown algorithm"),
    ("linregr_train('t_err', 't_err', 'y', 'x')", psycopg.errors.DuplicateTable, "already exists"),
    ("linregr_train('t_err', 'a.b.c', 'y', 'x')", psycopg.errors.SyntaxError, "too many dotted names"),
])
def test_bad_input_gives_its_sqlstate_and_no_model(db, call, error, match):
    db.execute("CREATE TABLE t_err (y float8, x float8, label text, v float8[])")
    db.execute("INSERT INTO t_err VALUES (5, 1, 'a', '{1}'), (7, 2, 'b', '{2}')")
    db.execute("CREATE TABLE t_empty (y float8, x float8)")
    db.execute("CREATE TABLE t_nan (y float8, x float8)")
    db.execute("INSERT INTO t_nan VALUES (1, 'NaN'), (2, 3)")
    with pytest.raises(error, match=match):
        db.execute(f"SELECT * FROM learnedidx.{call}")
    assert db.execute("SELECT count(*) FROM learnedidx.models").fetchone()[0] == 0
    assert db.execute("SELECT to_regclass('t_err') IS NOT NULL").fetchone()[0]


def test_a_bad_reader_setting_is_refused_with_its_name(db):
    db.execute("CREATE TABLE r (y float8, x float8)")
    db.execute("SET learnedidx.reader = 'strider-ish'")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"learnedidx.reader\) must be"):
        db.execute("SELECT * FROM learnedidx.linregr_train('r', 'r_m', 'y', 'x')")
    db.execute("SET learnedidx.reader = 'pages'")  # forcing pages on what they cannot read
    db.execute("CREATE VIEW rv AS SELECT * FROM r")
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="not a table"):
        db.execute("SELECT * FROM learnedidx.linregr_train('rv', 'r_m', 'y', 'x')")
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="expression"):
        db.execute("SELECT * FROM learnedidx.linregr_train('r', 'r_m', 'y', 'x * 2')")


def test_query_sources_expressions_and_madlib_intercept_forms(db):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 2))
    y = X @ [2.0, -1.0] + 0.5 + rng.normal(scale=0.1, size=400)
    load(db, "q", X, y, array=False)
    sub = db.execute("SELECT x0, x1, y FROM q WHERE id <= 300 ORDER BY id").fetchall()
    Xs, ys = np.array([r[:2] for r in sub]), np.array([r[2] for r in sub])
    coef = db.execute("SELECT coef FROM learnedidx.linregr_train('SELECT * FROM q WHERE id <= 300', 'q_m', 'y', "
                      "'x0, x1')").fetchone()[0]
    sk = LinearRegression().fit(Xs, ys)
    np.testing.assert_allclose(coef, np.r_[sk.intercept_, sk.coef_], rtol=1e-8)
    assert db.execute("SELECT read_path FROM q_m_summary").fetchone()[0] == "query"
    # MADlib's ARRAY[1, ...] states the intercept; ARRAY[...] without the 1 fits none.
    a = db.execute("SELECT coef FROM learnedidx.linregr_train('q', 'q_a1', 'y', 'ARRAY[1, x0, x1]')").fetchone()[0]
    b = db.execute("SELECT coef FROM learnedidx.linregr_train('q', 'q_a0', 'y', 'array[x0,x1]')").fetchone()[0]
    sk_all = LinearRegression().fit(X, y)
    sk_none = LinearRegression(fit_intercept=False).fit(X, y)
    np.testing.assert_allclose(a, np.r_[sk_all.intercept_, sk_all.coef_], rtol=1e-8)
    np.testing.assert_allclose(b, sk_none.coef_, rtol=1e-8)
    # expressions of the source's columns (the query path): a quadratic term, a boolean label
    quad = db.execute("SELECT coef FROM learnedidx.linregr_train('q', 'q_e', 'y', 'ARRAY[1, x0, x0 * x0]')"
                      ).fetchone()[0]
    np.testing.assert_allclose(quad, np.linalg.lstsq(np.c_[np.ones(400), X[:, 0], X[:, 0] ** 2], y, rcond=None)[0],
                               rtol=1e-8)
    assert db.execute("SELECT read_path FROM q_e_summary").fetchone()[0] == "query"
    logit = db.execute("SELECT num_rows_processed FROM learnedidx.logregr_train('q', 'q_b', 'y > 0.5', "
                       "'x0, x1')").fetchone()[0]
    assert logit == 400
    # DAnA-style tables carry the intercept as a leading 1 in the features: no second one is added.
    load(db, "dana", np.c_[np.ones(400), X], y)
    c = db.execute("SELECT coef FROM learnedidx.linregr_train('dana', 'dana_m', 'y', 'features')").fetchone()[0]
    np.testing.assert_allclose(c, a, rtol=1e-8)
    p = db.execute("SELECT learnedidx.predict('dana_m', features) FROM dana WHERE id = 1").fetchone()[0]
    assert p == pytest.approx(sk_all.predict(X[:1])[0], rel=1e-8)


def test_boolean_labels_and_mixed_case_identifiers(db):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(500, 2))
    db.execute('CREATE TABLE "Mixed" ("Label" bool, "X a" float8, x2 real)')
    with db.cursor().copy('COPY "Mixed" FROM STDIN') as cp:
        for x in X:
            cp.write_row((bool(x[0] + 0.5 * x[1] > 0.1), float(x[0]), float(x[1])))
    coefs = {}
    for reader in ("pages", "query"):
        db.execute(f"SET learnedidx.reader = '{reader}'")
        coefs[reader] = db.execute(f"""SELECT coef FROM learnedidx.linregr_train('"Mixed"', '"Model {reader}"',
                                   '"Label"', '"X a", x2')""").fetchone()[0]
    labels = np.array([r[0] for r in db.execute('SELECT "Label"::int FROM "Mixed"').fetchall()], float)
    feats = np.array(db.execute('SELECT "X a", x2::float8 FROM "Mixed"').fetchall())
    np.testing.assert_allclose(coefs["pages"], np.linalg.lstsq(np.c_[np.ones(500), feats], labels, rcond=None)[0],
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(coefs["pages"], coefs["query"], rtol=1e-9, atol=1e-12)
    assert db.execute("""SELECT count(*) FROM learnedidx.models WHERE model = '"Model pages"'::regclass""").fetchone() == (1,)


def test_server_down_names_the_socket_and_leaves_no_model(db, tmp_path):
    db.execute("CREATE TABLE d (y float8, x float8)")
    db.execute("SELECT set_config('learnedidx.socket', %s, false)", (str(tmp_path / "none.sock"),))
    with pytest.raises(psycopg.errors.ConnectionFailure, match="none.sock"):
        db.execute("SELECT * FROM learnedidx.linregr_train('d', 'm2', 'y', 'x')")
    assert db.execute("SELECT count(*) FROM learnedidx.models").fetchone()[0] == 0


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
    load(db, "dsl_data", X, y)
    assert db.execute("SELECT learnedidx.register_algorithm('my_logregr', %s)", (DSL_LOGREG,)).fetchone() == \
        ("public.my_logregr",)
    coef = db.execute("SELECT coef FROM learnedidx.train('my_logregr', 'dsl_data', 'y', 'features')").fetchone()[0]
    builtin = db.execute("SELECT coef FROM learnedidx.logregr_train('dsl_data', 'dsl_ref', 'y', 'features')").fetchone()[0]
    np.testing.assert_allclose(coef, builtin, atol=0.15)
    assert db.execute("SELECT method FROM my_logregr_model_summary").fetchone() == ("public.my_logregr",)
    with pytest.raises(psycopg.errors.SyntaxError, match="not allowed"):
        db.execute("SELECT learnedidx.register_algorithm('evil', 'import os')")
    with pytest.raises(psycopg.errors.DuplicateObject, match="built-in"):
        db.execute("SELECT learnedidx.register_algorithm('svm', %s)", (DSL_LOGREG,))
    import sqlalchemy

    import learnedidx.indb

    eng = sqlalchemy.create_engine(
        f"postgresql+psycopg://{postgresql_proc.user}@/{db.info.dbname}?host={postgresql_proc.host}&port={postgresql_proc.port}")
    learnedidx.indb.register(eng, "my_logregr2", DSL_LOGREG)
    learnedidx.indb.register(db, "my_logregr3", DSL_LOGREG)
    names = {r[0] for r in db.execute("SELECT name FROM learnedidx.algorithms").fetchall()}
    assert {"my_logregr", "my_logregr2", "my_logregr3"} <= names
    eng.dispose()
    db.execute("SELECT learnedidx.drop_algorithm('my_logregr3')")
    with pytest.raises(psycopg.errors.UndefinedObject):
        db.execute("SELECT * FROM learnedidx.train('my_logregr3', 'dsl_data', 'y', 'features')")


def test_predict_checks_the_feature_count_and_drop_model_drops_models_only(db):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(100, 3))
    load(db, "p", X, X @ [1.0, 2.0, 3.0] + 4.0)
    db.execute("SELECT * FROM learnedidx.linregr_train('p', 'p_m', 'y', 'features')")
    assert db.execute("SELECT learnedidx.predict('p_m', '{1, 1, 1}')").fetchone()[0] == pytest.approx(10.0)
    assert db.execute("SELECT learnedidx.predict('p_m', '{1, 1, 1, 1}')").fetchone()[0] == pytest.approx(10.0)
    for bad in ("{1, 1}", "{1, 1, 1, 1, 1}"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="4 coefficients"):
            db.execute("SELECT learnedidx.predict('p_m', %s)", (bad,))
    db.execute("SELECT * FROM learnedidx.linregr_train('p', 'p_none', 'y', 'ARRAY[features[1], features[2]]')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="2 coefficients"):  # no intercept: exactly 2
        db.execute("SELECT learnedidx.predict('p_none', '{1}')")
    with pytest.raises(psycopg.errors.WrongObjectType, match="logistic"):
        db.execute("SELECT learnedidx.predict_proba('p_m', '{1, 2, 3}')")
    with pytest.raises(psycopg.errors.WrongObjectType, match="not a learnedidx model"):
        db.execute("SELECT learnedidx.drop_model('p')")
    with pytest.raises(psycopg.errors.UndefinedTable):
        db.execute("SELECT learnedidx.drop_model('nope')")
    db.execute("SELECT learnedidx.drop_model('p_m')")
    assert db.execute("SELECT to_regclass('p_m'), to_regclass('p_m_summary'), to_regclass('p') IS NOT NULL"
                      ).fetchone() == (None, None, True)
