"""MADlib 2.1's svm install-check, translated: its calls and assertions (modules/svm/test/svm.sql_in
and svm.ic.sql_in) run against learnedidx with only the schema changed, on tables this module
makes as MADlib's tests make theirs (the same shapes, labels and rules, drawn by PostgreSQL's
random() after a setseed, so the same rows every run); and the models of the same calls on the
same rows against MADlib's own, as MADlib 2.1 built on this project's machine computed them
(EXPECTED; each call in a fresh session: MADlib keeps the last call's L1 lambda for later calls
of a session).  With ``LEARNEDIDX_MADLIB_PREFIX`` (MADlib's install prefix), test_same_models_as_madlib
installs MADlib beside the extension and compares the calls live (docs/indb.md, "MADlib's svm").
"""
from __future__ import annotations

import numpy as np
import psycopg
import pytest

from tests.indb.conftest import MADLIB_PREFIX, connect, install_madlib, make_role, own_database
from tests.indb.madlib_svm_data import ABALONE, EXPECTED, KERNEL, UNBALANCED

pytestmark = pytest.mark.postgres

# ------------------------------------------------------------------ the data
#: The tables MADlib's svm tests read, made here: svm_*_data as MADlib's svm_generate_cls_data
#: (ind: three uniform values in [-20, 20) and +-10; label 1 when ind[1] > 0 and ind[2] < 0, else
#: -1), svr_*_data as svr_generate_cls_data (label ind[1] + 2 ind[2]), the normalized copies
#: (each feature standardized by its mean and standard deviation, then a 1, the rows shuffled),
#: and the figures' tables.
DATA = [
    "SELECT setseed(0.25)",
    *[f"""CREATE TABLE {t} AS SELECT id, ind, {label}::float8 AS label FROM (
            SELECT i AS id, ARRAY[random() * 40 - 20, random() * 40 - 20, random() * 40 - 20,
                                  CASE WHEN random() > 0.5 THEN 10 ELSE -10 END]::float8[] AS ind
            FROM generate_series(1, 1000) AS i) AS s"""
      for t, label in [("svm_train_data", "CASE WHEN ind[1] > 0 AND ind[2] < 0 THEN 1 ELSE -1 END"),
                       ("svm_test_data", "CASE WHEN ind[1] > 0 AND ind[2] < 0 THEN 1 ELSE -1 END"),
                       ("svr_train_data", "ind[1] + 2 * ind[2]"), ("svr_test_data", "ind[1] + 2 * ind[2]")]],
    *[f"""CREATE TABLE {t}_scale AS SELECT array_agg(m ORDER BY j) AS mu, array_agg(s ORDER BY j) AS sd
          FROM (SELECT j, avg(ind[j]) AS m, stddev(ind[j]) AS s FROM {t}, generate_series(1, 4) AS j GROUP BY j) AS q"""
      for t in ("svm_train_data", "svm_test_data")],
    """CREATE TABLE svm_normalized AS SELECT id, array_append(array_div(array_sub(ind, mu), sd), 1::float8) AS ind,
       label FROM svm_train_data, svm_train_data_scale ORDER BY random()""",
    """CREATE TABLE svm_test_normalized AS SELECT id, array_append(array_div(array_sub(ind, mu), sd), 1::float8)
       AS ind, label FROM svm_test_data, svm_test_data_scale""",
    """CREATE TABLE svm_normalized_fancy_label AS SELECT id, ind, CASE WHEN label = 1 THEN 'YES' ELSE 'NO' END AS label,
       id % 4 AS gid FROM svm_normalized ORDER BY random()""",
    """INSERT INTO svm_normalized_fancy_label VALUES (1001, ARRAY[NULL, 1, 1, 1, 1]::float8[], 'YES', 1001 % 4),
       (1002, ARRAY[5, 1, 1, 1, 1]::float8[], NULL, 1002 % 4), (1003, ARRAY[5, 1, NULL, 1, 1]::float8[], NULL, 1003 % 4)""",
    """CREATE TABLE svm_test_normalized_fancy_label AS SELECT id, ind,
       CASE WHEN label = 1 THEN 'YES' ELSE 'NO' END AS label, id % 4 AS gid FROM svm_test_normalized""",
    """INSERT INTO svm_test_normalized_fancy_label VALUES (1001, ARRAY[NULL, 1, 1, 1, 1]::float8[], 'YES', 1001 % 4)""",
    """CREATE TABLE abalone_train_small (sex text, id int, length float8, diameter float8, height float8,
       whole float8, shucked float8, viscera float8, shell float8, rings int)""",
    # svm_one_class's rows as MADlib trains them: the rows, then the origin (a zero row here; the
    # linear kernel's intercept makes it MADlib's origin)
    """CREATE TABLE one_class_rows AS SELECT ind, 1 AS y FROM svm_normalized
       UNION ALL SELECT ARRAY[0, 0, 0, 0, 0]::float8[], -1""",
    "CREATE TABLE abalone_eps (sex text, epsilon float8)",
    "INSERT INTO abalone_eps VALUES ('I', 0.2), ('M', 0.05)",
    "CREATE TABLE kernel_data (index bigint, x1 float8, x2 float8, y float8)",
    "CREATE TABLE svm_unbalanced (index bigint, x1 float8, x2 float8, y bigint, y_text text)",
]


def _load(conn: psycopg.Connection) -> None:
    for sql in DATA:
        conn.execute(sql)
    with conn.cursor().copy("COPY abalone_train_small (id, sex, length, diameter, height, whole, shucked, viscera, "
                            "shell, rings) FROM STDIN") as cp:
        for row in ABALONE:
            cp.write_row(row)
    with conn.cursor().copy("COPY kernel_data FROM STDIN") as cp:
        for row in KERNEL:
            cp.write_row(row)
    with conn.cursor().copy("COPY svm_unbalanced FROM STDIN") as cp:
        for index, x1, x2, y in UNBALANCED:
            cp.write_row((index, x1, x2, y, "one" if y else "zero"))


# ------------------------------------------------------------------ the install-check
#: svm.sql_in's statements after its tables are made: its calls and assertions as MADlib's file
#: writes them (MADlib's functions unqualified, found on the search_path), and its reads of
#: their outputs.
SVM_SQL_IN = [
    # check the default values
    "SELECT svm_regression('svr_train_data', 'svr_model', 'label', 'ind')",
    "SELECT * FROM svr_model",
    "SELECT * FROM svr_model_summary",
    "SELECT assert(norm1(coef) < 4, 'optimal coef should be close to [1, 2, 0, 0]!') FROM svr_model",
    # check the use of l1 norm
    """SELECT svm_regression('svr_train_data', 'svr_model2', 'label', 'ind', NULL, NULL, NULL,
       'init_stepsize=0.01, max_iter=50, lambda=2, norm=l2, epsilon=0.01', false)""",
    "SELECT svm_predict('svr_model2', 'svr_train_data', 'id', 'svr_test_result')",
    "SELECT * FROM svr_model2",
    """SELECT assert(avg(subq.err) < 0.1, 'prediction error is too large!') FROM (
       SELECT train.id, abs(train.label - test.prediction) AS err
       FROM svr_train_data AS train, svr_test_result AS test WHERE train.id = test.id) AS subq""",
    # linear classification
    "SELECT svm_classification('svm_train_data', 'lclss', 'label', 'ind', NULL, NULL, NULL, 'max_iter=10, tolerance=0')",
    "SELECT * FROM lclss",
    "SELECT * FROM lclss_summary",
    "SELECT svm_predict('lclss', 'svm_test_data', 'id', 'svm_test_predict')",
    # serial learning, with pre-conditioning
    """SELECT svm_classification('svm_normalized', 'svm_model', 'label', 'ind', NULL, NULL, NULL,
       'init_stepsize=0.03, decay_factor=1, max_iter=5, tolerance=0, lambda=0', false)""",
    "SELECT * FROM svm_model",
    "SELECT * FROM svm_model_summary",
    # l2
    """SELECT svm_classification('svm_normalized', 'svm_model_small_norm2', 'label', 'ind', NULL, NULL, NULL,
       'init_stepsize=0.03, decay_factor=1, max_iter=5, tolerance=0, lambda=1')""",
    "SELECT * FROM svm_model_small_norm2",
    """SELECT assert(norm2(l2.coef) < norm2(noreg.coef) OR ((norm2(l2.coef) - norm2(noreg.coef)) / norm2(noreg.coef)
       < 0.1 AND l2.loss < noreg.loss), 'l2 regularization should produce coef with smaller l2 norm!')
       FROM svm_model AS noreg, svm_model_small_norm2 AS l2""",
    # l1 makes sparse models
    """SELECT svm_classification('svm_normalized', 'svm_model_very_sparse', 'label', 'ind', NULL, NULL, NULL,
       'init_stepsize=0.03, decay_factor=1, max_iter=5, tolerance=0, lambda=1, norm=L1')""",
    "SELECT * FROM svm_model_very_sparse",
    """SELECT assert(count(*) > 0, 'The model is supposed to be sparse with reg=1')
       FROM (SELECT unnest(coef) AS w_i FROM svm_model_very_sparse) AS subq WHERE w_i != 0""",
    "SELECT svm_predict('svm_model', 'svm_test_normalized', 'id', 'svm_test_predict2')",
    """SELECT count(*) AS misclassification_count FROM svm_test_predict2 NATURAL JOIN svm_test_normalized
       WHERE prediction <> label""",
    # decay factor non-zero
    """SELECT svm_classification('svm_normalized', 'svm_model_decay_factor_non_zero', 'label', 'ind', NULL, NULL, NULL,
       'init_stepsize=0.03, decay_factor=0.9, max_iter=5, tolerance=0, lambda={0.001}', false)""",
    "SELECT norm_of_gradient FROM svm_model_decay_factor_non_zero",
    """CREATE TABLE svm_test_predict_decay_factor_nonzero AS SELECT svm_test_normalized.id,
       CASE WHEN array_dot(coef, ind) >= 0 THEN 1 ELSE -1 END AS prediction, label
       FROM svm_test_normalized, svm_model_decay_factor_non_zero""",
    "SELECT count(*) AS misclassification_count FROM svm_test_predict_decay_factor_nonzero WHERE prediction <> label",
    # labels that are not just 1, -1; grouping
    """SELECT svm_classification('svm_normalized_fancy_label', 'svm_model_fancy_label', 'label', 'ind', NULL, NULL,
       'gid', 'init_stepsize=0.03, decay_factor=0.9, max_iter=5, tolerance=0, lambda=0.001', TRUE)""",
    "SELECT * FROM svm_model_fancy_label",
    "SELECT * FROM svm_model_fancy_label_summary",
    "SELECT assert(count(*) = 4, '4 group exist') FROM svm_model_fancy_label",
    "SELECT svm_predict('svm_model_fancy_label', 'svm_test_normalized_fancy_label', 'id', 'svm_test_fancy_label')",
    """SELECT o.id, label, prediction, o.gid FROM svm_test_predict p, svm_test_normalized_fancy_label o
       WHERE o.id = p.id""",
    # the dependent variable an expression
    """SELECT svm_classification('svm_normalized', 'svm_model_expression', 'label>(ind[2]+ind[4])',
       'ARRAY[ind[1],ind[3],ind[5]]', NULL, NULL, NULL,
       'init_stepsize=0.03, decay_factor=0.9, max_iter=5, tolerance=0, lambda=0.001', false)""",
    "SELECT * FROM svm_model_expression",
    "SELECT * FROM svm_model_expression_summary",
    "SELECT svm_one_class('svm_normalized', 'svm_model_expression1', 'ind', 'gaussian')",
    "SELECT * FROM svm_model_expression1",
    "SELECT * FROM svm_model_expression1_summary",
    """SELECT svm_classification('svm_train_data', 'm5', 'label', 'ind', NULL, NULL, NULL,
       'init_stepsize=0.01, max_iter=20, lambda=0.000002')""",
    "SELECT svm_predict('m5', 'svm_test_data', 'id', 'svm_test_5')",
    "SELECT count(*) AS misclassification_count FROM svm_test_5 NATURAL JOIN svm_test_data WHERE prediction <> label",
    # kernels: the gaussian mapping's dimensions
    """SELECT svm_classification('svm_train_data', 'm6', 'label', 'ind', 'gaussian', 'n_components=3, fit_intercept=false',
       NULL, 'max_iter=2')""",
    "SELECT svm_predict('m6', 'svm_test_data', 'id', 'svm_test_6')",
    """SELECT assert(array_upper(coef, 1) = 3, 'The dimension of the coefficients must be equal to n_components (3)!')
       FROM m6""",
    # the gaussian kernel with grouping; a prefix names the kernel
    """SELECT svm_regression('abalone_train_small', 'svr_mdl_m', 'rings', 'ARRAY[1,diameter,shell,shucked,length]',
       'gau', 'n_components=10', 'sex',
       'max_iter=2, init_stepsize=1, decay_factor=0.9, tolerance=1e-16, epsilon = 0.05', false)""",
    "SELECT svm_predict('svr_mdl_m', 'abalone_train_small', 'id', 'svm_test_mdl_m')",
    """SELECT assert(array_upper(coef, 1) = 10, 'The dimension of the coefficients must be equal to n_components (10)!')
       FROM svr_mdl_m""",
    # the gaussian kernel with cross validation
    """SELECT svm_classification('svm_train_data', 'm7', 'label', 'ind', 'gaussian', 'n_components=3, fit_intercept=true',
       NULL, 'init_stepsize=[0.01, 0.1], max_iter=2, n_folds=3, lambda=[0.01, 0.1, 0.5], validation_result=m7_cv')""",
    "SELECT * FROM m7_cv",
    "SELECT svm_predict('m7', 'svm_test_data', 'id', 'svm_test_7')",
    """SELECT assert(array_upper(coef, 1) = 4,
       'The dimension of the coefficients must be equal to n_components + 1 (4)!') FROM m7""",
    # the gaussian kernel out of memory
    """SELECT svm_classification('svm_train_data', 'm8', 'label', 'ind', 'gaussian', 'n_components=3, fit_in_memory=False',
       NULL, 'max_iter=2, n_folds=3, lambda=[0.01, 0.1, 0.5]')""",
    """SELECT assert(array_upper(coef, 1) = 3, 'The dimension of the coefficients must be equal to n_components (3)!')
       FROM m8""",
    # the polynomial mapping's dimensions
    """SELECT svm_classification('svm_train_data', 'poly_mapping', 'label', 'ind', 'poly',
       'n_components=3, fit_intercept=true', NULL, 'max_iter=2')""",
    "SELECT svm_predict('poly_mapping', 'svm_test_data', 'id', 'svm_test_poly_mapping')",
    """SELECT assert(array_upper(coef, 1) = 4,
       'The dimension of the coefficients must be equal to n_components + 1 (4)!') FROM poly_mapping""",
    # the polynomial kernel with grouping
    """SELECT svm_regression('abalone_train_small', 'svr_mdl_poly', 'rings', 'ARRAY[1,diameter,shell,shucked,length]',
       'po', 'degree=2, n_components=10, fit_intercept=true', 'sex',
       'max_iter=2, init_stepsize=1, decay_factor=0.9, tolerance=1e-16, epsilon = 0.05', false)""",
    "SELECT svm_predict('svr_mdl_poly', 'abalone_train_small', 'id', 'svm_test_poly')",
    """SELECT assert(array_upper(coef, 1) = 11,
       'The dimension of the coefficients must be equal to n_components + 1 (11)!') FROM svr_mdl_poly""",
    """SELECT svm_classification('kernel_data', 'm10', 'y', 'array[x1, x2]', 'gaussian',
       'gamma=1, n_components=20, random_state=2', NULL, 'init_stepsize=1, max_iter=10')""",
    "SELECT * FROM m10",
    # class weights
    "DROP TABLE IF EXISTS svm_out, svm_out_summary",
    """SELECT svm_classification('svm_unbalanced', 'svm_out', 'y', 'ARRAY[1, x1, x2]', 'linear', NULL, NULL,
       'max_iter=1000, init_stepsize=0.1, class_weight=balanced')""",
    "DROP TABLE IF EXISTS svm_predict_out",
    "SELECT svm_predict('svm_out', 'svm_unbalanced', 'index', 'svm_predict_out')",
    """SELECT assert(count(*)/10. >= 0.70, 'Prediction accuracy for unbalanced class is too low')
       FROM svm_unbalanced JOIN svm_predict_out USING (index) WHERE y = prediction AND y = 1""",
    "DROP TABLE IF EXISTS svm_out, svm_out_summary",
    """SELECT svm_classification('svm_unbalanced', 'svm_out', 'y', 'ARRAY[1, x1, x2]', 'linear', NULL, NULL,
       'max_iter=1000, init_stepsize=0.1, class_weight={1:10, 0:1}')""",
    "DROP TABLE IF EXISTS svm_predict_out",
    "SELECT svm_predict('svm_out', 'svm_unbalanced', 'index', 'svm_predict_out')",
    """SELECT assert(count(*)/10. >= 0.70,
       'Prediction accuracy for unbalanced numeric class with mapping class_weight is too low')
       FROM svm_unbalanced JOIN svm_predict_out USING (index) WHERE y = prediction AND y = 1""",
    "DROP TABLE IF EXISTS svm_out, svm_out_summary",
    """SELECT svm_classification('svm_unbalanced', 'svm_out', 'y_text', 'ARRAY[1, x1, x2]', 'linear', NULL, NULL,
       'max_iter=1000, init_stepsize=0.1, class_weight={zero:1, one:10}')""",
    "DROP TABLE IF EXISTS svm_predict_out",
    "SELECT svm_predict('svm_out', 'svm_unbalanced', 'index', 'svm_predict_out')",
    """SELECT assert(count(*)/10. >= 0.70,
       'Prediction accuracy for unbalanced text class with mapping class_weight is too low')
       FROM svm_unbalanced JOIN svm_predict_out USING (index) WHERE y_text = prediction AND y_text = 'one'""",
    # cross validation
    """SELECT svm_one_class('svm_normalized', 'svm_model_expression2', 'ind', 'gaussian', NULL, NULL,
       'init_stepsize=0.01, max_iter=3, lambda=[0.0002, 0.2], '
       'n_folds=3, epsilon = [0.003, 0.2]')""",
    "SELECT * FROM svm_model_expression2",
    "SELECT * FROM svm_model_expression2_summary",
    "SELECT svm_predict('svm_model_expression2', 'svm_test_normalized', 'id', 'svm_test_model_expression2')",
    """SELECT svm_regression('svr_train_data', 'm1', 'label', 'ind', 'poly', NULL, NULL,
       'init_stepsize=0.01, max_iter=3, lambda=[0.0002, 0.2], '
       'n_folds=3, epsilon = [0.003, 0.2]', true)""",
    "SELECT svm_predict('m1', 'svm_test_data', 'id', 'svm_test_8')",
    """SELECT svm_regression('svr_train_data', 'm2', 'label', 'ind', NULL, NULL, NULL,
       'init_stepsize=0.01, max_iter=2, lambda=[0.0002, 0.2], n_folds=3', false)""",
    "SELECT reg_params FROM m2_summary",
    """SELECT svm_classification('svm_train_data', 'm3', 'label', 'ind', NULL, NULL, NULL,
       'init_stepsize=[0.01, 1], max_iter=3, lambda=[20, 0.0002, 0.02], '
       'n_folds=3, epsilon=[0.1, 1], validation_result=val_res')""",
    "SELECT * FROM val_res",
    """SELECT svm_classification('svm_train_data', 'm4', 'label', 'ind', NULL, NULL, NULL,
       'init_stepsize=0.01, max_iter=20, lambda=[20, 0.0002, 0.02], '
       'n_folds=3, validation_result=val_res2')""",
    "SELECT * FROM val_res",
    "SELECT reg_params FROM m1_summary",
    "SELECT svm_predict('m1', 'svm_test_data', 'id', 'svm_test_reg_params')",
    # the polynomial kernel with cross validation
    """SELECT svm_classification('svm_train_data', 'm9', 'label', 'ind', 'poly', 'n_components=3', NULL,
       'max_iter=2, n_folds=3, lambda=[0.01, 0.1, 0.5]')""",
    "SELECT svm_predict('m9', 'svm_test_data', 'id', 'svm_test_9')",
    """SELECT assert(array_upper(coef, 1) = 3, 'The dimension of the coefficients must be equal to n_components (3)!')
       FROM m9""",
]

#: svm.ic.sql_in: the gaussian kernel with grouping on three rows, one per group.
SVM_IC_SQL_IN = [
    "CREATE TABLE abalone_train_small (sex TEXT, id SERIAL NOT NULL, length DOUBLE PRECISION, "
    "diameter DOUBLE PRECISION, rings INTEGER)",
    "INSERT INTO abalone_train_small(id,sex,length,diameter,rings) VALUES (1040,'F',0.66,0.475,6), "
    "(177,'I',0.315,0.21,5), (3359,'M',0.285,0.215,5)",
    """SELECT svm_regression('abalone_train_small', 'svr_mdl_m', 'rings', 'ARRAY[1,diameter]', 'gau', 'n_components=3',
       'sex', 'max_iter=1, init_stepsize=1, decay_factor=0.9, tolerance=1e-16, epsilon = 0.05', false)""",
    "SELECT svm_predict('svr_mdl_m','abalone_train_small', 'id', 'svm_test_mdl_m')",
]


@pytest.fixture(scope="module")
def madlib_db(postgresql_proc, accel_server):
    """A database of its own for this module: the extension, the data in schema svm_data, one
    schema per install-check file (as madpack's install-check makes), the search_path of MADlib's
    tests with learnedidx where they have madlib."""
    name = "madlib_svm"
    conn = own_database(postgresql_proc, name)
    conn.execute("CREATE EXTENSION learnedidx CASCADE")
    conn.execute(f"ALTER DATABASE {name} SET learnedidx.socket = '{accel_server.socket_path}'")
    conn.execute("SELECT set_config('learnedidx.socket', %s, false)", (accel_server.socket_path,))
    conn.execute("CREATE SCHEMA svm_data")
    conn.execute("SET search_path = svm_data, learnedidx")
    _load(conn)
    yield conn
    conn.close()


def _run(conn: psycopg.Connection, schema: str, statements: list[str]) -> list[tuple[int, str, str]]:
    """Run ``statements`` in a fresh ``schema`` (first on the search_path); the failures."""
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"SET search_path = {schema}, svm_data, learnedidx")
    failures = []
    for i, sql in enumerate(statements):
        try:
            conn.execute(sql)
        except psycopg.Error as e:
            failures.append((i + 1, " ".join(sql.split())[:90], f"{e.sqlstate}: {str(e).splitlines()[0]}"))
    return failures


def test_svm_sql_in(madlib_db):
    """Every statement of svm.sql_in runs, and every assert() holds (a failing one raises)."""
    assert _run(madlib_db, "svm_sql_in", SVM_SQL_IN) == []
    c = madlib_db
    # what MADlib's file shows without asserting, asserted: the outputs' shapes and choices
    assert c.execute("SELECT count(*) FROM svm_test_fancy_label").fetchone() == (1000,)  # the NULL row left out
    assert c.execute("SELECT array_length(coef, 1), num_rows_processed, num_rows_skipped, dep_var_mapping "
                     "FROM svm_model_expression1").fetchone() == (101, 1001, -1, [-1.0, 1.0])
    assert [r[0] for r in c.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'val_res' "
                                    "AND table_schema = 'svm_sql_in' ORDER BY ordinal_position")] == \
        ["lambda", "init_stepsize", "mean_score", "std_dev_score"]
    assert c.execute("SELECT count(*) FROM val_res").fetchone() == (6,)


def test_svm_ic_sql_in(madlib_db):
    assert _run(madlib_db, "svm_ic_sql_in", SVM_IC_SQL_IN) == []
    # one model per group of one row, each of n_components coefficients
    assert madlib_db.execute("SELECT count(*), min(array_length(coef, 1)), max(num_rows_processed) "
                             "FROM svr_mdl_m").fetchone() == (3, 3, 1)


# ------------------------------------------------------------------ the same models as MADlib's
#: Calls of MADlib's svm tests (and a few more: eps_table, the ARRAY form with fit_intercept, an
#: inverse step-size schedule), {s} the functions' schema and {m} the model's name; a pair is
#: MADlib's call and learnedidx's.  Left out, as their rows reach MADlib in another order than the
#: source's (learnedidx trains in the source's order): svm_one_class's (MADlib's UNION adds the
#: origin in hash order: "one_class_linear" trains MADlib's svm_classification on the same rows
#: in the source's order instead), fit_in_memory=false's (a join) and a grouped linear call on
#: abalone_train_small (MADlib's hash join and sort order each group's rows).
CALLS: dict[str, str | tuple[str, str]] = {
    "svr_default": "{s}.svm_regression('svr_train_data', '{m}', 'label', 'ind')",
    "svr_l2": "{s}.svm_regression('svr_train_data', '{m}', 'label', 'ind', NULL, NULL, NULL, "
              "'init_stepsize=0.01, max_iter=50, lambda=2, norm=l2, epsilon=0.01', false)",
    "linear": "{s}.svm_classification('svm_train_data', '{m}', 'label', 'ind', NULL, NULL, NULL, "
              "'max_iter=10, tolerance=0')",
    "no_reg": "{s}.svm_classification('svm_normalized', '{m}', 'label', 'ind', NULL, NULL, NULL, "
              "'init_stepsize=0.03, decay_factor=1, max_iter=5, tolerance=0, lambda=0', false)",
    "l1": "{s}.svm_classification('svm_normalized', '{m}', 'label', 'ind', NULL, NULL, NULL, "
          "'init_stepsize=0.03, decay_factor=1, max_iter=5, tolerance=0, lambda=1, norm=L1')",
    "decay": "{s}.svm_classification('svm_normalized', '{m}', 'label', 'ind', NULL, NULL, NULL, "
             "'init_stepsize=0.03, decay_factor=0.9, max_iter=5, tolerance=0, lambda={{0.001}}', false)",
    "inverse_decay": "{s}.svm_classification('svm_normalized', '{m}', 'label', 'ind', NULL, NULL, NULL, "
                     "'init_stepsize=0.5, decay_factor=-1, max_iter=7, tolerance=0, lambda=0.1')",
    "text_labels_grouped": "{s}.svm_classification('svm_normalized_fancy_label', '{m}', 'label', 'ind', NULL, NULL, "
                           "'gid', 'init_stepsize=0.03, decay_factor=0.9, max_iter=5, tolerance=0, lambda=0.001', TRUE)",
    "expression": "{s}.svm_classification('svm_normalized', '{m}', 'label>(ind[2]+ind[4])', "
                  "'ARRAY[ind[1],ind[3],ind[5]]', NULL, NULL, NULL, "
                  "'init_stepsize=0.03, decay_factor=0.9, max_iter=5, tolerance=0, lambda=0.001', false)",
    "converges": "{s}.svm_classification('svm_train_data', '{m}', 'label', 'ind', NULL, NULL, NULL, "
                 "'init_stepsize=0.01, max_iter=20, lambda=0.000002')",
    "gaussian": "{s}.svm_classification('svm_train_data', '{m}', 'label', 'ind', 'gaussian', "
                "'n_components=3, fit_intercept=false', NULL, 'max_iter=2')",
    "gaussian_grouped": "{s}.svm_regression('abalone_train_small', '{m}', 'rings', "
                        "'ARRAY[1,diameter,shell,shucked,length]', 'gau', 'n_components=10', 'sex', "
                        "'max_iter=2, init_stepsize=1, decay_factor=0.9, tolerance=1e-16, epsilon = 0.05', false)",
    "gaussian_cv": "{s}.svm_classification('svm_train_data', '{m}', 'label', 'ind', 'gaussian', "
                   "'n_components=3, fit_intercept=true', NULL, 'init_stepsize=[0.01, 0.1], max_iter=2, n_folds=3, "
                   "lambda=[0.01, 0.1, 0.5], validation_result={m}_cv')",
    "polynomial": "{s}.svm_classification('svm_train_data', '{m}', 'label', 'ind', 'poly', "
                  "'n_components=3, fit_intercept=true', NULL, 'max_iter=2')",
    "polynomial_grouped": "{s}.svm_regression('abalone_train_small', '{m}', 'rings', "
                          "'ARRAY[1,diameter,shell,shucked,length]', 'po', 'degree=2, n_components=10, "
                          "fit_intercept=true', 'sex', 'max_iter=2, init_stepsize=1, decay_factor=0.9, "
                          "tolerance=1e-16, epsilon = 0.05', false)",
    "gaussian_seeded": "{s}.svm_classification('kernel_data', '{m}', 'y', 'array[x1, x2]', 'gaussian', "
                       "'gamma=1, n_components=20, random_state=2', NULL, 'init_stepsize=1, max_iter=10')",
    "balanced": "{s}.svm_classification('svm_unbalanced', '{m}', 'y', 'ARRAY[1, x1, x2]', 'linear', NULL, NULL, "
                "'max_iter=1000, init_stepsize=0.1, class_weight=balanced')",
    "class_weight": "{s}.svm_classification('svm_unbalanced', '{m}', 'y', 'ARRAY[1, x1, x2]', 'linear', NULL, NULL, "
                    "'max_iter=1000, init_stepsize=0.1, class_weight={{1:10, 0:1}}')",
    "class_weight_text": "{s}.svm_classification('svm_unbalanced', '{m}', 'y_text', 'ARRAY[1, x1, x2]', 'linear', "
                         "NULL, NULL, 'max_iter=1000, init_stepsize=0.1, class_weight={{zero:1, one:10}}')",
    "one_class_linear": ("{s}.svm_classification('one_class_rows', '{m}', 'y', 'ind', 'linear', 'fit_intercept=true', "
                         "NULL, 'max_iter=5, class_weight=balanced, lambda=0.1, init_stepsize=0.1')",
                         "{s}.svm_one_class('svm_normalized', '{m}', 'ind', 'linear', NULL, NULL, "
                         "'max_iter=5, lambda=0.1, init_stepsize=0.1')"),
    "polynomial_svr_cv": "{s}.svm_regression('svr_train_data', '{m}', 'label', 'ind', 'poly', NULL, NULL, "
                         "'init_stepsize=0.01, max_iter=3, lambda=[0.0002, 0.2], n_folds=3, "
                         "epsilon = [0.003, 0.2], validation_result={m}_cv', true)",
    "svr_cv": "{s}.svm_regression('svr_train_data', '{m}', 'label', 'ind', NULL, NULL, NULL, "
              "'init_stepsize=0.01, max_iter=2, lambda=[0.0002, 0.2], n_folds=3, validation_result={m}_cv', false)",
    "svc_cv": "{s}.svm_classification('svm_train_data', '{m}', 'label', 'ind', NULL, NULL, NULL, "
              "'init_stepsize=[0.01, 1], max_iter=3, lambda=[20, 0.0002, 0.02], n_folds=3, epsilon=[0.1, 1], "
              "validation_result={m}_cv')",
    "polynomial_cv": "{s}.svm_classification('svm_train_data', '{m}', 'label', 'ind', 'poly', 'n_components=3', "
                     "NULL, 'max_iter=2, n_folds=3, lambda=[0.01, 0.1, 0.5], validation_result={m}_cv')",
    "eps_table": "{s}.svm_regression('abalone_train_small', '{m}', 'rings', 'ARRAY[1,diameter,shell,shucked,length]', "
                 "'gaussian', 'n_components=6', 'sex', 'max_iter=3, init_stepsize=0.5, tolerance=0, epsilon=0.1, "
                 "eps_table=abalone_eps', false)",
    "intercept_last": "{s}.svm_classification('svm_unbalanced', '{m}', 'y', 'ARRAY[x1 / 60]', 'linear', "
                      "'fit_intercept=true', NULL, 'max_iter=30')",
}


def _figures(conn: psycopg.Connection, model: str) -> dict:
    """What a call's tables say: per group (its grouping values, joined), the model's coef, loss,
    norm_of_gradient, iterations, rows and labels; the summary's method and kernel and
    regularization texts; cross validation's table."""
    groups = {}
    for (r,) in conn.execute(f"SELECT to_jsonb(m) FROM {model} AS m").fetchall():
        key = ",".join(str(r[k]) for k in sorted(r) if k not in MODEL_COLUMNS)
        groups[key] = {k: r[k] for k in ("coef", "loss", "norm_of_gradient", "num_iterations", "num_rows_processed",
                                         "num_rows_skipped")}
        groups[key]["dep_var_mapping"] = [str(v) for v in r["dep_var_mapping"]]
    method, kernel_params, reg_params = conn.execute(
        f"SELECT method, kernel_params, reg_params FROM {model}_summary").fetchone()
    out = {"groups": groups, "method": method, "kernel_params": kernel_params, "reg_params": reg_params}
    if conn.execute(f"SELECT to_regclass('{model}_cv') IS NOT NULL").fetchone()[0]:
        out["cv"] = [[float(v) for v in r] for r in conn.execute(f"SELECT * FROM {model}_cv").fetchall()]
    return out


MODEL_COLUMNS = {"coef", "loss", "norm_of_gradient", "num_iterations", "num_rows_processed", "num_rows_skipped",
                 "dep_var_mapping", "train_seconds", "accel_seconds"}
#: Relative tolerance of models and their losses (the two compute in another order: 1e-12 apart).
RTOL = 1e-9


def _apart(a, b) -> float:
    """How far ``b`` is from ``a``, relative (norm-wise for vectors)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-300))


def _differences(want: dict, got: dict) -> list[str]:
    """Where figures ``got`` differ from ``want`` (``want``'s coef may be shortened to [norm,
    first, last] for long models)."""
    out = [f"{k}: {want[k]!r} != {got[k]!r}" for k in ("method", "kernel_params", "reg_params") if want[k] != got[k]]
    if set(want["groups"]) != set(got["groups"]):
        return out + [f"groups {sorted(want['groups'])} != {sorted(got['groups'])}"]
    for g, w in want["groups"].items():
        h = got["groups"][g]
        coef = h["coef"]
        if len(w["coef"]) != len(coef):
            coef = [float(np.linalg.norm(coef)), coef[0], coef[-1]]
        for k in ("coef", "loss", "norm_of_gradient"):
            if _apart(w[k], coef if k == "coef" else h[k]) > RTOL:
                out.append(f"group {g!r} {k}: {w[k]} != {coef if k == 'coef' else h[k]}")
        out += [f"group {g!r} {k}: {w[k]} != {h[k]}" for k in ("num_iterations", "num_rows_processed", "num_rows_skipped",
                                                               "dep_var_mapping") if w[k] != h[k]]
    if "cv" in want or "cv" in got:
        if np.shape(want.get("cv")) != np.shape(got.get("cv")) or _apart(want["cv"], got["cv"]) > RTOL:
            out.append(f"cv: {want.get('cv')} != {got.get('cv')}")
    return out


def test_same_models_as_madlib_figures(madlib_db):
    """Each call of CALLS trains, on this module's tables, the model MADlib's same call trains
    (EXPECTED): the same coefficients, loss, gradient norm, iterations, rows, labels, summary
    texts and cross validation table."""
    conn = madlib_db
    conn.execute("CREATE SCHEMA svm_models")
    conn.execute("SET search_path = svm_models, svm_data, learnedidx")
    wrong = {}
    for name, call in CALLS.items():
        conn.execute("SELECT " + (call if isinstance(call, str) else call[1]).format(s="learnedidx", m=name))
        got = _figures(conn, name)
        if name == "one_class_linear":  # MADlib's svm_classification read the origin's row from its table
            got["groups"][""]["num_rows_skipped"] += 1
        if _differences(EXPECTED[name], got):
            wrong[name] = _differences(EXPECTED[name], got)
    assert wrong == {}
    # the case: 'ARRAY[x / 60]' with fit_intercept=true has its intercept, last, as MADlib's
    assert len(EXPECTED["intercept_last"]["groups"][""]["coef"]) == 2


@pytest.mark.skipif(not MADLIB_PREFIX, reason="compares with MADlib 2.1: set LEARNEDIDX_MADLIB_PREFIX to its "
                                              "install prefix (docs/indb.md, \"MADlib 2.1 as the peer\")")
def test_same_models_as_madlib(madlib_db, postgresql_proc):
    """MADlib installed beside the extension (madpack, as the cluster's user) trains each call
    of CALLS, each in a fresh session, and learnedidx the same call: the same figures."""
    install_madlib(madlib_db, postgresql_proc)
    madlib_db.execute("CREATE SCHEMA svm_peer")
    wrong = {}
    for name, call in CALLS.items():
        figures = []
        for k, schema in enumerate(("madlib", "learnedidx")):
            with connect(madlib_db) as c:
                c.execute("SET search_path = svm_peer, svm_data, public")
                c.execute("SELECT " + (call if isinstance(call, str) else call[k]).format(s=schema, m=f"{name}_{k}"))
                figures.append(_figures(c, f"{name}_{k}"))
        if name == "one_class_linear":
            figures[1]["groups"][""]["num_rows_skipped"] += 1
        if _differences(*figures):
            wrong[name] = _differences(*figures)
    assert wrong == {}


# ------------------------------------------------------------------ beyond MADlib's tests
def test_cross_validation_orders_rows_by_postgres_random(madlib_db):
    """MADlib's folds follow PostgreSQL's random() after setseed(0.5); the server draws the same
    numbers without touching the caller's session."""
    from learnedidx.indb.runtime.svm_igd import folds, pg_random
    with connect(madlib_db) as c:
        c.execute("SELECT setseed(0.5)")
        drawn = [r[0] for r in c.execute("SELECT random() FROM generate_series(1, 2000)")]
    assert pg_random(2000).tolist() == drawn
    # MADlib's folds of 10 rows in 3: [1, 5), [5, 8), [8, 11)
    assert folds(10, 3) == [(1, 5), (5, 8), (8, 11)]


@pytest.mark.parametrize("call,sqlstate,match", [
    ("svm_classification('svm_train_data', 'e', 'label', 'ind', NULL, NULL, NULL, 'lambda=[0.1, 1]')", "22023",
     "cross validation needs n_folds"),
    ("svm_classification('svm_train_data', 'e', 'label', 'ind', NULL, NULL, NULL, 'steps=3')", "22023",
     "steps is not a parameter"),
    ("svm_classification('svm_train_data', 'e', 'label', 'ind', 'rbf')", "22023", "invalid kernel function"),
    ("svm_classification('svm_unbalanced', 'e', 'y', 'ARRAY[x1, x2]', NULL, NULL, NULL, 'class_weight={2:5}')",
     "22023", "names '2', which is not a label"),
    ("svm_classification('abalone_train_small', 'e', 'sex', 'ARRAY[length]')", "22023", "exactly two label values"),
    ("svm_classification('svm_normalized_fancy_label', 'e', 'label', 'ind', NULL, NULL, 'gid', "
     "'lambda=[0.1, 1], n_folds=3')", "0A000", "with grouping is not supported"),
    ("svm_one_class('svm_normalized_fancy_label', 'e', 'ind', NULL, NULL, 'gid')", "0A000", "grouping_col is not"),
    ("svm_classification('svm_train_data', 'svm_train_data', 'label', 'ind')", "42P07", "already exists"),
    ("svm_classification('svm_train_data', 'e', 'label', 'ind', NULL, NULL, NULL, "
     "'lambda=[0.1, 1], n_folds=2, validation_result=svm_unbalanced')", "42P07", "svm_unbalanced already exists"),
    ("svm_classification('svm_train_data', 'e', 'label', 'ind', NULL, NULL, 'coef')", "42701", "grouping column coef"),
    ("svm_classification('svm_train_data', 'e', 'label', 'ind', NULL, NULL, 'nope')", "42703", "nope"),
    ("svm_regression('svm_train_data', 'e', NULL, 'ind')", "22023", "dependent_varname must not be empty"),
    ("svm_predict('no_such_model', 'svm_test_data', 'id', 'e')", "42P01", "does not exist"),
    ("svm_predict('svm_train_data', 'svm_test_data', 'id', 'e')", "42809", "is not an svm model"),
])
def test_svm_user_errors_have_their_sqlstate(madlib_db, call, sqlstate, match):
    with connect(madlib_db) as c:
        c.execute("SET search_path = svm_data, learnedidx")
        with pytest.raises(psycopg.Error, match=match) as e:
            c.execute("SELECT " + call)
        assert e.value.sqlstate == sqlstate


def test_svm_predict_scores_as_the_model_says(madlib_db):
    """svm_predict's decision_function is coef . the model's features: the features themselves
    (and the intercept's 1, last), or the kernel's random features computed from its _random
    table (numpy here, the C function there); learnedidx.predict scores the linear models and
    refuses the others."""
    c = madlib_db
    c.execute("CREATE SCHEMA svm_scores")
    c.execute("SET search_path = svm_scores, svm_data, learnedidx")
    X = np.array([r[0] for r in c.execute("SELECT ind FROM svm_test_data ORDER BY id")])
    c.execute("SELECT svm_classification('svm_train_data', 'lin', 'label', 'ind', 'linear', 'fit_intercept=true', "
              "NULL, 'max_iter=3')")
    c.execute("SELECT svm_classification('svm_train_data', 'gau', 'label', 'ind', 'gaussian', 'n_components=5, "
              "gamma=0.1', NULL, 'max_iter=3')")
    c.execute("SELECT svm_regression('svr_train_data', 'pol', 'label', 'ind', 'poly', 'n_components=6, degree=2, "
              "fit_intercept=true', NULL, 'max_iter=3')")
    rnd = {m: {d: np.array(v) for d, v in c.execute(f"SELECT desp, val FROM {m}_random")} for m in ("gau", "pol")}
    w = rnd["gau"]["weights"].reshape(5, 4)
    features = {"lin": np.c_[X, np.ones(len(X))],
                "gau": np.sqrt(2 / 5) * np.cos(X @ w.T + rnd["gau"]["offsets"])}
    z = X @ rnd["pol"]["weights"].reshape(-1, 4).T
    reps = rnd["pol"]["reps"].astype(int)
    ends = np.cumsum(reps)
    folded = np.stack([z[:, e - r:e].prod(axis=1) for r, e in zip(reps, ends)], axis=1) * rnd["pol"]["coefs"]
    constants = np.broadcast_to(rnd["pol"]["other_features"], (len(X), 6 - len(reps)))
    features["pol"] = np.c_[np.sqrt(1 / 6) * np.c_[folded, constants], np.ones(len(X))]
    for m in ("lin", "gau", "pol"):
        c.execute(f"SELECT svm_predict('{m}', 'svm_test_data', 'id', '{m}_out')")
        coef = np.array(c.execute(f"SELECT coef FROM {m}").fetchone()[0])
        out = c.execute(f"SELECT decision_function, prediction FROM {m}_out ORDER BY id").fetchall()
        np.testing.assert_allclose([r[0] for r in out], features[m] @ coef, rtol=1e-12, atol=1e-12)
        if m != "pol":
            assert [r[1] for r in out] == [1.0 if d >= 0 else -1.0 for d, _ in out]
    assert c.execute("SELECT count(*) FROM svm_test_data WHERE learnedidx.predict('lin', ind || 1::float8) "
                     "IS DISTINCT FROM (SELECT prediction FROM lin_out o WHERE o.id = svm_test_data.id)").fetchone() \
        == (0,)
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="gaussian kernel"):
        c.execute("SELECT learnedidx.predict('gau', ind) FROM svm_test_data")
    c.execute("SELECT learnedidx.drop_model('gau')")  # its _random table too
    assert c.execute("SELECT to_regclass('gau'), to_regclass('gau_summary'), to_regclass('gau_random')").fetchone() \
        == (None, None, None)
    # labels keep their type: a boolean expression's, text
    c.execute("SELECT svm_classification('svm_normalized', 'b', 'label > 0', 'ind', NULL, NULL, NULL, 'max_iter=1')")
    assert c.execute("SELECT dep_var_mapping, pg_typeof(dep_var_mapping)::text FROM b").fetchone() == \
        ([False, True], "boolean[]")
    assert c.execute("SELECT learnedidx.predict('b', ind) FROM svm_normalized ORDER BY id LIMIT 1").fetchone()[0] in (0, 1)
    c.execute("SELECT svm_classification('svm_unbalanced', 't', 'y_text', 'ARRAY[x1, x2]', NULL, NULL, NULL, "
              "'max_iter=1')")
    assert c.execute("SELECT dep_var_mapping FROM t").fetchone() == (["one", "zero"],)
    with pytest.raises(psycopg.errors.DatatypeMismatch, match="labels .dep_var_mapping. have type text"):
        c.execute("SELECT learnedidx.predict('t', ARRAY[x1, x2]) FROM svm_unbalanced")


def test_svm_predict_runs_no_code_of_another_role(madlib_db):
    """svm_predict evaluates the model's feature expression (SQL its owner wrote): only members of
    the owner's role may; and a model whose tables' row-level security applies, or a view in a
    model's place, is refused."""
    c = madlib_db
    c.execute("CREATE SCHEMA svm_roles")
    c.execute("GRANT USAGE, CREATE ON SCHEMA svm_roles, svm_data TO PUBLIC")
    owner, other = make_role(c, "svm_owner"), make_role(c, "svm_other")
    c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA svm_data TO PUBLIC")
    with connect(c, owner) as o:
        o.execute("SET search_path = svm_roles, svm_data, learnedidx")
        o.execute("SELECT svm_classification('svm_train_data', 'owned', 'label', 'ind', NULL, NULL, NULL, 'max_iter=1')")
        o.execute("GRANT SELECT ON owned, owned_summary TO PUBLIC")
    with connect(c, other) as x:
        x.execute("SET search_path = svm_roles, svm_data, learnedidx")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="feature expression of model owned"):
            x.execute("SELECT svm_predict('owned', 'svm_test_data', 'id', 'stolen')")
    c.execute(f"GRANT {owner} TO {other}")
    with connect(c, other) as x:
        x.execute("SET search_path = svm_roles, svm_data, learnedidx")
        x.execute("SELECT svm_predict('owned', 'svm_test_data', 'id', 'scored')")
    with connect(c, owner) as o:
        o.execute("SET search_path = svm_roles, svm_data, learnedidx")
        o.execute("ALTER TABLE owned ENABLE ROW LEVEL SECURITY")
        o.execute("ALTER TABLE owned FORCE ROW LEVEL SECURITY")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security applies"):
            o.execute("SELECT svm_predict('owned', 'svm_test_data', 'id', 'scored2')")
        o.execute("ALTER TABLE owned RENAME TO owned_t")
        o.execute("CREATE VIEW owned AS SELECT * FROM owned_t")
        with pytest.raises(psycopg.errors.WrongObjectType, match="not an svm model"):
            o.execute("SELECT svm_predict('owned', 'svm_test_data', 'id', 'scored3')")
        # a kernel's _random table is read without casts: a column of another type is refused
        o.execute("SELECT svm_classification('svm_train_data', 'kern', 'label', 'ind', 'gaussian', 'n_components=2', "
                  "NULL, 'max_iter=1')")
        o.execute("ALTER TABLE kern_random ALTER COLUMN val TYPE text[]")
        with pytest.raises(psycopg.errors.WrongObjectType, match="column val of .*kern_random has another type"):
            o.execute("SELECT svm_predict('kern', 'svm_test_data', 'id', 'scored4')")
