"""A MADlib user's calls and output tables: MADlib's arguments, grouping_cols, expressions, its
output and _summary columns, its statistics (against statsmodels' OLS and Logit on the same
rows, which define them as MADlib does) and its prediction functions."""
from __future__ import annotations

import numpy as np
import psycopg
import pytest
import statsmodels.api as sm
from sklearn.datasets import load_diabetes

from tests.indb.conftest import load

pytestmark = pytest.mark.postgres

# MADlib 2.1's columns (src/ports/postgres/modules/regress/linear.py_in, logistic.py_in,
# svm/svm.py_in), in its order; ours follow them.
MADLIB_OUT = {
    "linregr": ["coef", "r2", "std_err", "t_stats", "p_values", "condition_no", "num_rows_processed",
                "num_missing_rows_skipped", "variance_covariance"],
    "logregr": ["coef", "log_likelihood", "std_err", "z_stats", "p_values", "odds_ratios", "condition_no",
                "num_rows_processed", "num_missing_rows_skipped", "num_iterations", "variance_covariance"],
    "svm": ["coef", "loss", "norm_of_gradient", "num_iterations", "num_rows_processed", "num_rows_skipped",
            "dep_var_mapping"],
}
MADLIB_SUMMARY = {
    "linregr": ["method", "source_table", "out_table", "dependent_varname", "independent_varname",
                "num_rows_processed", "num_missing_rows_skipped", "grouping_col"],
    "logregr": ["method", "source_table", "out_table", "dependent_varname", "independent_varname",
                "optimizer_params", "num_all_groups", "num_failed_groups", "num_rows_processed",
                "num_missing_rows_skipped", "grouping_col"],
    "svm": ["method", "version_number", "source_table", "model_table", "dependent_varname", "independent_varname",
            "kernel_func", "kernel_params", "grouping_col", "optim_params", "reg_params", "num_all_groups",
            "num_failed_groups", "total_rows_processed", "total_rows_skipped"],
}
OUR_SUMMARY = ["grouping_columns", "grouping_expressions", "intercept", "num_features", "feature_expression", "params", "read_path", "timings",
               "created"]


def columns(db, table: str) -> list[str]:
    return [r[0] for r in db.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                                     "AND NOT attisdropped ORDER BY attnum", (table,)).fetchall()]


def row(db, sql: str, *args) -> dict:
    cur = db.execute(sql, args or None)
    return dict(zip([d.name for d in cur.description], cur.fetchone()))


def _regression_table(db, n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    X, y = load_diabetes(return_X_y=True)
    X, y = X[:n, :4] * 10, y[:n]
    load(db, "diab", X, y)
    db.execute("ALTER TABLE diab ADD COLUMN grp text, ADD COLUMN region int")
    db.execute("UPDATE diab SET grp = CASE WHEN id % 3 = 0 THEN 'north' WHEN id % 3 = 1 THEN 'south' END, "
               "region = id % 2")  # grp NULL on a third of the rows: its own group, as in GROUP BY
    db.execute("INSERT INTO diab (y, features, grp, region) VALUES (NULL, '{1,2,3,4}', 'north', 0), "
               "(1, '{1,NULL,3,4}', 'west', 1)")  # skipped rows; 'west' has no usable row
    return X, y


def _group_rows(db, where: str) -> tuple[np.ndarray, np.ndarray]:
    rows = db.execute(f"SELECT features, y FROM diab WHERE {where} AND y IS NOT NULL "
                      "AND array_position(features, NULL) IS NULL ORDER BY id").fetchall()
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


def _check_ols(out: dict, X: np.ndarray, y: np.ndarray) -> None:
    ref = sm.OLS(y, sm.add_constant(X)).fit()
    np.testing.assert_allclose(out["coef"], ref.params, rtol=1e-8)
    np.testing.assert_allclose(out["r2"], ref.rsquared, rtol=1e-8)
    np.testing.assert_allclose(out["std_err"], ref.bse, rtol=1e-7)
    np.testing.assert_allclose(out["t_stats"], ref.tvalues, rtol=1e-7)
    np.testing.assert_allclose(out["p_values"], ref.pvalues, rtol=1e-6, atol=1e-300)
    np.testing.assert_allclose(out["variance_covariance"], ref.cov_params(), rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(out["condition_no"], ref.condition_number, rtol=1e-6)  # of X: MADlib's sqrt of X'X's
    assert out["num_rows_processed"] == len(y)


def test_linregr_statistics_are_statsmodels_ols(db):
    X, y = _regression_table(db)
    db.execute("SELECT * FROM learnedidx.linregr_train('diab', 'lin', 'y', 'ARRAY[1]::float8[] || features')")
    assert columns(db, "lin") == MADLIB_OUT["linregr"] + ["train_seconds", "accel_seconds"]
    out = row(db, "SELECT * FROM lin")
    Xa, ya = _group_rows(db, "true")
    _check_ols(out, Xa, ya)
    assert out["num_missing_rows_skipped"] == 2
    summary = row(db, "SELECT * FROM lin_summary")
    assert columns(db, "lin_summary") == MADLIB_SUMMARY["linregr"] + OUR_SUMMARY
    assert {k: summary[k] for k in MADLIB_SUMMARY["linregr"]} == {
        "method": "linregr", "source_table": "diab", "out_table": "public.lin", "dependent_varname": "y",
        "independent_varname": "ARRAY[1]::float8[] || features", "num_rows_processed": len(ya),
        "num_missing_rows_skipped": 2, "grouping_col": None}
    # the same model from the plain column (our intercept) and from MADlib's ARRAY[1, ...] form
    for indep in ("features", "ARRAY[1, features[1], features[2], features[3], features[4]]"):
        coef = db.execute("SELECT coef FROM learnedidx.linregr_train('diab', %s, 'y', %s)",
                          (f"lin_{len(indep)}", indep)).fetchone()[0]
        np.testing.assert_allclose(coef, out["coef"], rtol=1e-9)


def test_grouping_cols_train_one_model_per_group_as_madlib_writes_them(db):
    _regression_table(db)
    # MADlib's positional form: the fifth argument is grouping_cols
    n = db.execute("SELECT count(*) FROM learnedidx.linregr_train('diab', 'lin_g', 'y', 'features', 'grp, region')"
                   ).fetchone()[0]
    groups = db.execute("SELECT grp, region, count(*) FROM diab GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    assert n == len(groups) == 7  # north/south/NULL x 0/1, and west
    assert columns(db, "lin_g") == ["grp", "region"] + MADLIB_OUT["linregr"] + ["train_seconds", "accel_seconds"]
    assert db.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'lin_g'::regclass "
                      "AND attnum BETWEEN 1 AND 2 ORDER BY attnum").fetchall() == [("text",), ("integer",)]
    for grp, region, count in groups:
        out = row(db, "SELECT * FROM lin_g WHERE grp IS NOT DISTINCT FROM %s AND region = %s", grp, region)
        X, y = _group_rows(db, f"grp IS NOT DISTINCT FROM {'NULL' if grp is None else repr(grp)} "
                               f"AND region = {region}")
        if len(y) == 0:  # every row skipped: a row without a model, as MADlib writes it
            assert (out["coef"], out["num_rows_processed"], out["num_missing_rows_skipped"]) == (None, 0, count)
            continue
        _check_ols(out, X, y)
        assert out["num_missing_rows_skipped"] == count - len(y)
    summary = row(db, "SELECT * FROM lin_g_summary")
    assert (summary["grouping_col"], summary["grouping_columns"], summary["num_missing_rows_skipped"]) == \
        ("grp, region", ["grp", "region"], 2)
    # predict picks the group's model; MADlib's way, a join and linregr_predict, agrees
    got = db.execute("SELECT d.id, learnedidx.predict('lin_g', d.features, d.grp, d.region), "
                     "learnedidx.linregr_predict(m.coef, ARRAY[1]::float8[] || d.features) FROM diab d "
                     "JOIN lin_g m ON m.grp IS NOT DISTINCT FROM d.grp AND m.region = d.region "
                     "ORDER BY d.id").fetchall()
    assert len(got) == 302 and all(a == pytest.approx(b, rel=1e-12) for _, a, b in got if b is not None)
    assert [a for _, a, b in got if b is None] == [None]  # 'west': no model
    assert db.execute("SELECT learnedidx.predict('lin_g', '{1,2,3,4}', 'east', 0), "
                      "learnedidx.predict('lin_g', '{1,2,3,4}', NULL, '1') IS NOT NULL").fetchone() == (None, True)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"a model per group of \(grp, region\)"):
        db.execute("SELECT learnedidx.predict('lin_g', '{1,2,3,4}')")
    db.execute("SELECT * FROM learnedidx.linregr_train('diab', 'lin_one', 'y', 'features')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="one model, not one per group"):
        db.execute("SELECT learnedidx.predict('lin_one', '{1,2,3,4}', 'north', 0)")
    assert db.execute("SELECT learnedidx.predict_table('lin_g', 'diab', 'pred_g')").fetchone() == (302,)
    assert db.execute("SELECT count(*) FROM pred_g p JOIN diab d USING (id) WHERE p.prediction IS DISTINCT FROM "
                      "learnedidx.predict('lin_g', d.features, d.grp, d.region)").fetchone() == (0,)


def test_logregr_statistics_are_statsmodels_logit_with_a_boolean_expression_label(db):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(600, 3))
    p = 1 / (1 + np.exp(-(0.4 + X @ [1.2, -0.8, 0.3])))
    score, threshold = rng.random(600) * 100, p * 100
    db.execute("CREATE TABLE pat (id serial, score float8, t float8, features float8[])")
    with db.cursor().copy("COPY pat (score, t, features) FROM STDIN") as cp:
        for s, t, x in zip(score, threshold, X):
            cp.write_row((float(s), float(t), [float(v) for v in x]))
    db.execute("CREATE VIEW patv AS SELECT * FROM pat")
    label = (score < threshold).astype(float)  # the label is MADlib's usual boolean expression
    db.execute("SELECT * FROM learnedidx.logregr_train('patv', 'lg', 'score < t', 'ARRAY[1, features[1], features[2], "
               "features[3]]', NULL, 50, 'irls', 1e-10)")
    assert columns(db, "lg") == MADLIB_OUT["logregr"] + ["train_seconds", "accel_seconds"]
    out = row(db, "SELECT * FROM lg")
    ref = sm.Logit(label, sm.add_constant(X)).fit(disp=0, tol=1e-12, maxiter=100)
    np.testing.assert_allclose(out["coef"], ref.params, rtol=1e-6)
    np.testing.assert_allclose(out["log_likelihood"], ref.llf, rtol=1e-9)
    np.testing.assert_allclose(out["std_err"], ref.bse, rtol=1e-5)
    np.testing.assert_allclose(out["z_stats"], ref.tvalues, rtol=1e-5)
    np.testing.assert_allclose(out["p_values"], ref.pvalues, rtol=1e-4)
    np.testing.assert_allclose(out["odds_ratios"], np.exp(ref.params), rtol=1e-6)
    np.testing.assert_allclose(out["variance_covariance"], ref.cov_params(), rtol=1e-5)
    np.testing.assert_allclose(out["condition_no"], np.sqrt(np.linalg.cond(-ref.model.hessian(ref.params))),
                               rtol=1e-5)
    assert (out["num_rows_processed"], out["num_missing_rows_skipped"]) == (600, 0)
    assert 1 <= out["num_iterations"] <= 50
    summary = row(db, "SELECT * FROM lg_summary")
    assert columns(db, "lg_summary")[:len(MADLIB_SUMMARY["logregr"])] == MADLIB_SUMMARY["logregr"]
    assert (summary["optimizer_params"], summary["num_all_groups"], summary["num_failed_groups"]) == \
        ("optimizer=irls, max_iter=50, tolerance=1e-10", 1, 0)
    # MADlib's prediction functions over the coefficients, and predict / predict_proba
    got = db.execute("SELECT learnedidx.logregr_predict(coef, ARRAY[1] || features), "
                     "learnedidx.logregr_predict_prob(coef, ARRAY[1] || features), "
                     "learnedidx.predict('lg', features), learnedidx.predict_proba('lg', features) "
                     "FROM pat, lg ORDER BY id").fetchall()
    prob = ref.predict(sm.add_constant(X))
    np.testing.assert_allclose([g[1] for g in got], prob, rtol=1e-5)
    np.testing.assert_allclose([g[3] for g in got], prob, rtol=1e-5)
    assert [g[0] for g in got] == [bool(q > 0.5) for q in prob]
    assert [g[2] for g in got] == [float(q > 0.5) for q in prob]


def test_logregr_with_a_boolean_column_and_grouping(db):
    rng = np.random.default_rng(4)
    db.execute("CREATE TABLE churn (id serial, plan text, tenure float8, calls float8, left_us bool)")
    rows = []
    for plan, (b0, b1, b2) in {"basic": (0.5, -1.0, 0.8), "pro": (-0.5, 0.6, -0.4)}.items():
        x = rng.normal(size=(400, 2))
        yv = rng.random(400) < 1 / (1 + np.exp(-(b0 + x @ [b1, b2])))
        rows += [(plan, float(a), float(b), bool(c)) for (a, b), c in zip(x, yv)]
    with db.cursor().copy("COPY churn (plan, tenure, calls, left_us) FROM STDIN") as cp:
        for r in rows:
            cp.write_row(r)
    db.execute("SELECT * FROM learnedidx.logregr_train('churn', 'churn_m', 'left_us', 'ARRAY[1, tenure, calls]', "
               "'plan', 30, 'irls', 1e-10)")
    assert columns(db, "churn_m")[0] == "plan"
    for plan in ("basic", "pro"):
        data = np.array([(r[1], r[2], r[3]) for r in rows if r[0] == plan], float)
        ref = sm.Logit(data[:, 2], sm.add_constant(data[:, :2])).fit(disp=0, tol=1e-12)
        out = row(db, "SELECT coef, std_err, log_likelihood FROM churn_m WHERE plan = %s", plan)
        np.testing.assert_allclose(out["coef"], ref.params, rtol=1e-6)
        np.testing.assert_allclose(out["std_err"], ref.bse, rtol=1e-5)
        np.testing.assert_allclose(out["log_likelihood"], ref.llf, rtol=1e-9)
        got = db.execute("SELECT learnedidx.predict_proba('churn_m', ARRAY[0.5, -1], %s::text)", (plan,)).fetchone()
        assert got[0] == pytest.approx(float(ref.predict([[1, 0.5, -1]])[0]), rel=1e-5)
    assert row(db, "SELECT num_all_groups, num_failed_groups, grouping_col FROM churn_m_summary") == \
        {"num_all_groups": 2, "num_failed_groups": 0, "grouping_col": "plan"}


def _svm_oracle(X: np.ndarray, labels: np.ndarray, coef: np.ndarray, lam: float) -> tuple[float, float]:
    """MADlib's svm loss and norm_of_gradient (linear_svm_igd: hinge losses and subgradients
    summed over the rows, lambda / 2 ||w||^2 added, the loss divided by the rows) for our
    penalty: lam per row, the intercept coef[0] not penalized."""
    y = np.where(labels == labels.max(), 1.0, -1.0)
    w = np.r_[0.0, coef[1:]]
    n = len(y)
    m = y * (X @ coef)
    loss = (np.maximum(0, 1 - m).sum() + n * lam / 2 * w @ w) / n
    grad = sum(-y[i] * X[i] for i in range(n) if m[i] < 1) + n * lam * w
    return loss, float(np.linalg.norm(grad))


def test_svm_output_tables_and_grouping(db):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(500, 3))
    y = (X @ [1.0, -1.0, 0.5] + 0.3 * rng.normal(size=500) > 0).astype(float) * 5 + 2  # labels 2 and 7
    load(db, "sv", X, y)
    db.execute("ALTER TABLE sv ADD COLUMN half int")
    db.execute("UPDATE sv SET half = (id > 250)::int")
    db.execute("SELECT * FROM learnedidx.svm_train('sv', 'sv_m', 'y', 'features', lambda => 0.01, max_iter => 20)")
    assert columns(db, "sv_m") == MADLIB_OUT["svm"] + ["train_seconds", "accel_seconds"]
    out = row(db, "SELECT * FROM sv_m")
    loss, norm = _svm_oracle(np.c_[np.ones(500), X], y, np.array(out["coef"]), 0.01)
    assert (out["loss"], out["norm_of_gradient"]) == (pytest.approx(loss, rel=1e-9), pytest.approx(norm, rel=1e-9))
    assert (out["dep_var_mapping"], out["num_rows_processed"], out["num_rows_skipped"], out["num_iterations"]) == \
        ([2.0, 7.0], 500, 0, 20)
    assert columns(db, "sv_m_summary")[:len(MADLIB_SUMMARY["svm"])] == MADLIB_SUMMARY["svm"]
    summary = row(db, "SELECT * FROM sv_m_summary")
    assert (summary["method"], summary["kernel_func"], summary["total_rows_processed"]) == ("SVC", "linear", 500)
    # grouped: one model per half; labels mapped once for the whole table (MADlib's dep_var_mapping)
    db.execute("SELECT * FROM learnedidx.svm_train('sv', 'sv_g', 'y', 'features', lambda => 0.01, max_iter => 20, "
               "grouping_cols => 'half')")
    for half in (0, 1):
        g = row(db, "SELECT * FROM sv_g WHERE half = %s", half)
        rows = slice(0, 250) if half == 0 else slice(250, 500)
        loss, norm = _svm_oracle(np.c_[np.ones(250), X[rows]], y[rows], np.array(g["coef"]), 0.01)
        assert (g["loss"], g["norm_of_gradient"], g["dep_var_mapping"]) == \
            (pytest.approx(loss, rel=1e-9), pytest.approx(norm, rel=1e-9), [2.0, 7.0])
    pred = db.execute("SELECT learnedidx.predict('sv_g', features, half) = y FROM sv").fetchall()
    assert np.mean([p[0] for p in pred]) > 0.9


def test_madlib_prediction_functions_over_coefficients(db):
    assert db.execute("SELECT learnedidx.linregr_predict('{1, 2, 3}', '{1, 10, 100}'), "
                      "learnedidx.logregr_predict('{0, 1}', '{1, -0.5}'), "
                      "learnedidx.logregr_predict_prob('{0, 1}', '{1, 2}'), "
                      "learnedidx.logregr_predict_prob('{0, 1}', '{1, -800}'), "
                      "learnedidx.logregr_predict_prob('{0, 1}', '{1, 800}'), "
                      "learnedidx.linregr_predict('{1, 2}', '{1, NULL}'), "
                      "learnedidx.linregr_predict(NULL, '{1}')").fetchone() == \
        (321.0, False, pytest.approx(1 / (1 + np.exp(-2))), 0.0, 1.0, None, None)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="same length"):
        db.execute("SELECT learnedidx.linregr_predict('{1, 2, 3}', '{1, 2}')")
    with pytest.raises(psycopg.errors.NullValueNotAllowed, match="coefficients contain NULL"):
        db.execute("SELECT learnedidx.logregr_predict('{1, NULL}', '{1, 2}')")


def test_predict_proba_is_stable_for_scores_far_below_zero(db):
    """Standardized breast-cancer-like data gave scores below -709, where exp overflowed (22003)."""
    db.execute("CREATE TABLE far (y float8, features float8[])")
    db.execute("INSERT INTO far SELECT (g % 2)::float8, ARRAY[g % 2 * 50 - 25 + (g % 7) * 0.01] "
               "FROM generate_series(1, 200) g")
    db.execute("SELECT * FROM learnedidx.logregr_train('far', 'far_m', 'y', 'features', max_iter => 5)")
    got = db.execute("SELECT learnedidx.predict_proba('far_m', ARRAY[-1e6]), learnedidx.predict_proba('far_m', "
                     "ARRAY[1e6]), learnedidx.predict('far_m', ARRAY[-1e6])").fetchone()
    assert got == (0.0, 1.0, 0.0)


def test_grouping_cols_are_column_names_and_refused_otherwise(db):
    db.execute("CREATE TABLE gt (y float8, x float8, g int, coef int)")
    db.execute("INSERT INTO gt SELECT i, i % 5, i % 2, 0 FROM generate_series(1, 50) i")
    for grouping, error, match in [
        ("g); DROP TABLE gt; --", psycopg.errors.SyntaxError, "must be SQL expressions"),
        ("g,", psycopg.errors.SyntaxError, "must be SQL expressions"),
        ("nope", psycopg.errors.UndefinedColumn, '"nope" of grouping_cols'),
        ("coef", psycopg.errors.DuplicateColumn, "coef has the name of an output column"),
    ]:
        with pytest.raises(error, match=match):
            db.execute("SELECT * FROM learnedidx.linregr_train('gt', 'gt_m', 'y', 'x', %s)", (grouping,))
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="grouping_cols is supported by"):
        db.execute("SELECT * FROM learnedidx.train('ridge', 'gt', 'y', 'x', '{\"grouping_cols\": \"g\"}')")
    db.execute("SET learnedidx.reader = 'pages'")
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="grouping_cols reads the query path"):
        db.execute("SELECT * FROM learnedidx.linregr_train('gt', 'gt_m', 'y', 'x', 'g')")
    db.execute("RESET learnedidx.reader")
    assert db.execute("SELECT to_regclass('gt') IS NOT NULL, to_regclass('gt_m')").fetchone() == (True, None)
    # a query source, grouped by one of its columns
    n = db.execute("SELECT count(*) FROM learnedidx.linregr_train('SELECT y, x, g AS \"Side\" FROM gt', 'gq', 'y', "
                   "'x', '\"Side\"')").fetchone()[0]
    assert n == 2 and columns(db, "gq")[0] == "Side"


def test_query_sources_of_every_form_and_the_older_reader_names(db):
    db.execute("CREATE TABLE qs (y float8, x float8)")
    db.execute("INSERT INTO qs SELECT i, 2 * i FROM generate_series(1, 20) i")
    for i, source in enumerate(["SELECT * FROM qs", "WITH w AS (SELECT * FROM qs) SELECT * FROM w",
                                "(SELECT y, x FROM qs)", "VALUES (1::float8, 2::float8), (2, 5), (3, 6)"]):
        dep, indep = ("column1", "column2") if source.startswith("VALUES") else ("y", "x")
        n = db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train(%s, %s, %s, %s)",
                       (source, f"qs_{i}", dep, indep)).fetchone()[0]
        assert (n, row(db, f"SELECT read_path FROM qs_{i}_summary")["read_path"]) == (3 if i == 3 else 20, "query")
    for old, path in (("strider", "pages"), ("copy", "query")):
        db.execute(f"SET learnedidx.reader = '{old}'")
        db.execute(f"SELECT * FROM learnedidx.linregr_train('qs', 'qs_{old}', 'y', 'x')")
        assert row(db, f"SELECT read_path FROM qs_{old}_summary")["read_path"] == path
    db.execute("RESET learnedidx.reader")


def test_a_rank_deficient_design_gets_madlibs_pseudo_inverse(db):
    """x2 = 2 x1: XᵀX is singular (condition number past 1e20); the statistics come from its
    pseudo-inverse, as in statsmodels' OLS."""
    rng = np.random.default_rng(8)
    x1 = rng.normal(size=100)
    X = np.c_[x1, 2 * x1, rng.normal(size=100)]
    y = X @ [1.0, 1.0, -2.0] + rng.normal(size=100)
    load(db, "rd", X, y)
    db.execute("SELECT * FROM learnedidx.linregr_train('rd', 'rd_m', 'y', 'features')")
    out = row(db, "SELECT * FROM rd_m")
    ref = sm.OLS(y, sm.add_constant(X)).fit()
    np.testing.assert_allclose(out["coef"], ref.params, rtol=1e-6, atol=1e-9)
    # MADlib divides the residual sum of squares by n - k (k the coefficients), statsmodels by
    # n - rank: they differ exactly by that factor when the design is rank-deficient
    np.testing.assert_allclose(out["std_err"], ref.bse * np.sqrt(ref.df_resid / (100 - 4)), rtol=1e-5)
    np.testing.assert_allclose(out["r2"], ref.rsquared, rtol=1e-9)
    assert out["condition_no"] > 1e15


def test_failed_groups_and_a_group_of_one_class(db):
    db.execute("CREATE TABLE fg (y float8, x float8, g text)")
    db.execute("INSERT INTO fg SELECT (i % 3 = 0)::int, i % 7 + 0.5 * (i % 3), 'both' FROM generate_series(1, 60) i")
    db.execute("INSERT INTO fg SELECT 1, i, 'ones' FROM generate_series(1, 10) i")  # one class only
    db.execute("INSERT INTO fg SELECT NULL, i, 'empty' FROM generate_series(1, 5) i")  # every row skipped
    db.execute("SELECT * FROM learnedidx.logregr_train('fg', 'fg_lr', 'y', 'x', 'g', 10)")
    s = row(db, "SELECT num_all_groups, num_failed_groups, num_missing_rows_skipped FROM fg_lr_summary")
    assert s == {"num_all_groups": 3, "num_failed_groups": 1, "num_missing_rows_skipped": 5}
    assert row(db, "SELECT coef, num_rows_processed, num_missing_rows_skipped FROM fg_lr WHERE g = 'empty'") == \
        {"coef": None, "num_rows_processed": 0, "num_missing_rows_skipped": 5}
    # svm maps the labels once for the table: the group of one class trains (+1 everywhere)
    db.execute("SELECT * FROM learnedidx.svm_train('fg', 'fg_svm', 'y', 'x', grouping_cols => 'g')")
    ones = row(db, "SELECT coef, dep_var_mapping FROM fg_svm WHERE g = 'ones'")
    assert ones["dep_var_mapping"] == [0.0, 1.0] and ones["coef"] is not None
    assert db.execute("SELECT bool_and(learnedidx.predict('fg_svm', ARRAY[x], g) = 1) FROM fg WHERE g = 'ones'"
                      ).fetchone() == (True,)
