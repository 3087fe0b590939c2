"""Regression beyond MADlib's own tests: least squares that stay right where the normal equations
fail, the linregr aggregate's state (an R factor) in parallel and partial aggregation and shared
with the server, MADlib's statistics where they are undefined, the Breusch-Pagan test, logregr's
iterations and statistics, its cg and igd, and the special functions of the extension's C.

Oracles: numpy's lstsq and pinv, statsmodels (OLS, Breusch-Pagan), scipy's distributions, and
numpy transcriptions of MADlib's definitions (logistic.cpp) where no library has them.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import psycopg
import pytest
from scipy import stats
from statsmodels.stats.diagnostic import het_breuschpagan

from tests.indb import madlib_regress_data as data
from tests.indb.conftest import load
from tests.pgfixtures import PG_BINDIR

EXTENSION = Path(__file__).resolve().parents[2] / "extension"


def _fit(db, call: str, table: str) -> dict:
    db.execute(f"SELECT * FROM learnedidx.{call}")
    cur = db.execute(f"SELECT * FROM {table}")
    return dict(zip([d.name for d in cur.description], cur.fetchone()))


def _aggregate(db, sql: str) -> dict:
    cur = db.execute(sql)
    return dict(zip([d.name for d in cur.description], cur.fetchone()))


# ------------------------------------------------------------------ least squares that stay right
@pytest.mark.postgres
def test_least_squares_stay_right_on_epoch_timestamps(db):
    """500 hourly epoch timestamps, t ~ 1.7e9, y linear in t: X'X has condition 3e25 and the
    normal equations lose the intercept (they gave [3.5e-18, 6.0e-9], r2 0.043).  From the R
    factor: numpy's lstsq within 1e-6, r2 within 1e-9, by linregr_train (both read paths) and
    by the aggregate; and with t scaled by 1e8 and 1e-8, where lstsq itself fails at 1e8, the
    same line (the oracle: lstsq on the columns scaled to unit norm)."""
    rng = np.random.default_rng(42)
    t = 1.7e9 + 3600.0 * np.arange(500)
    y = -462.25 + 2.778e-7 * t + 0.05 * rng.normal(size=500)
    db.execute("CREATE TABLE ts (t float8, t8 float8, tm8 float8, y float8)")
    with db.cursor().copy("COPY ts FROM STDIN") as cp:
        for ti, yi in zip(t, y):
            cp.write_row((float(ti), float(ti * 1e8), float(ti * 1e-8), float(yi)))
    for scale, column in ((1.0, "t"), (1e8, "t8"), (1e-8, "tm8")):
        X = np.c_[np.ones(500), t * scale]
        norms = np.linalg.norm(X, axis=0)
        want = np.linalg.lstsq(X / norms, y, rcond=None)[0] / norms
        if scale == 1.0:
            np.testing.assert_allclose(want, np.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-9)
        r2 = 1 - np.sum((y - X @ want) ** 2) / np.sum((y - y.mean()) ** 2)
        assert r2 > 0.8
        for reader, indep, name in (("pages", column, f"ts_p{column}"), ("query", f"ARRAY[1, {column}]",
                                                                          f"ts_q{column}")):
            db.execute(f"SET learnedidx.reader = '{reader}'")
            got = _fit(db, f"linregr_train('ts', '{name}', 'y', '{indep}')", name)
            np.testing.assert_allclose(got["coef"], want, rtol=1e-6, err_msg=f"{reader} {column}")
            assert got["r2"] == pytest.approx(r2, abs=1e-9)
        agg = _aggregate(db, f"SELECT (learnedidx.linregr(y, ARRAY[1, {column}])).* FROM ts")
        np.testing.assert_allclose(agg["coef"], want, rtol=1e-6, err_msg=column)
        assert agg["r2"] == pytest.approx(r2, abs=1e-9)
        # MADlib's condition number: of X (its sqrt of X'X's eigenvalue ratio), here from R
        assert agg["condition_no"] == pytest.approx(np.linalg.cond(X), rel=1e-6)
    db.execute("RESET learnedidx.reader")


@pytest.mark.postgres
def test_a_rank_deficient_design_is_the_minimum_norm_least_squares_solution(db):
    """x2 = 2 x1 and a column of zeros: MADlib's pseudo-inverse semantics, numpy's pinv."""
    rng = np.random.default_rng(9)
    x1 = rng.normal(size=200)
    X = np.c_[x1, 2 * x1, np.zeros(200), rng.normal(size=200)]
    y = X @ [1.0, 1.0, 0.0, -2.0] + 3.0 + rng.normal(size=200)
    load(db, "rk", X, y)
    Xi = np.c_[np.ones(200), X]
    want = np.linalg.pinv(Xi) @ y
    r2 = 1 - np.sum((y - Xi @ want) ** 2) / np.sum((y - y.mean()) ** 2)
    got = _fit(db, "linregr_train('rk', 'rk_m', 'y', 'features')", "rk_m")
    agg = _aggregate(db, "SELECT (learnedidx.linregr(y, ARRAY[1]::float8[] || features)).* FROM rk")
    for out in (got, agg):
        np.testing.assert_allclose(out["coef"], want, rtol=1e-8, atol=1e-10)
        assert out["r2"] == pytest.approx(r2, rel=1e-10)
        assert out["condition_no"] > 1e15
        # (X'X)^+ of the statistics: pinv's too, with MADlib's n - k degrees of freedom
        variance = np.sum((y - Xi @ want) ** 2) / (200 - 5)
        np.testing.assert_allclose(out["std_err"], np.sqrt(variance * np.diag(np.linalg.pinv(Xi.T @ Xi))),
                                   rtol=1e-6, atol=1e-12)


# ------------------------------------------------------------------ the aggregate and its state
@pytest.mark.postgres
def test_the_aggregate_runs_parallel_and_partial_aggregation_and_its_state_is_the_servers(db):
    """linregr is a parallel-safe aggregate with a combine function: PostgreSQL runs it with
    parallel workers (Partial / Finalize Aggregate) and partition by partition, with the same
    result as a serial scan, as linregr_train's (the server's states are the same bytes) and as
    statsmodels' OLS.  Merging two halves' states is merging the rows."""
    rng = np.random.default_rng(5)
    n = 60_000
    X = rng.normal(size=(n, 3)) * [1.0, 100.0, 0.01]
    y = X @ [2.0, -0.03, 50.0] + 7.0 + rng.normal(size=n)
    db.execute("CREATE TABLE pa (id int, y float8, x float8[]) PARTITION BY RANGE (id)")
    for i in range(3):
        db.execute(f"CREATE TABLE pa{i} PARTITION OF pa FOR VALUES FROM ({i * 20_000}) TO ({(i + 1) * 20_000})")
    with db.cursor().copy("COPY pa FROM STDIN") as cp:
        for i, (xi, yi) in enumerate(zip(X, y)):
            cp.write_row((i, float(yi), [float(v) for v in xi]))
    db.execute("ANALYZE pa")
    query = "SELECT (learnedidx.linregr(y, ARRAY[1]::float8[] || x)).* FROM pa"
    serial = _aggregate(db, query)
    for settings, plan_has in [
        ("SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; "
         "SET min_parallel_table_scan_size = 0; SET enable_partitionwise_aggregate = off", "Workers Launched"),
        ("SET max_parallel_workers_per_gather = 0; SET enable_partitionwise_aggregate = on", "Partial Aggregate"),
    ]:
        for s in settings.split("; "):
            db.execute(s)
        plan = "\n".join(r[0] for r in db.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {query}").fetchall())
        assert "Partial Aggregate" in plan and "Finalize Aggregate" in plan and plan_has in plan, plan
        got = _aggregate(db, query)
        for key in ("coef", "std_err", "t_stats", "p_values"):
            np.testing.assert_allclose(got[key], serial[key], rtol=1e-9, err_msg=key)
        assert (got["r2"], got["num_processed"]) == (pytest.approx(serial["r2"], rel=1e-12), n)
        for s in settings.split("; "):
            db.execute("RESET " + s.split()[1])
    trained = _fit(db, "linregr_train('pa', 'pa_m', 'y', 'x')", "pa_m")
    for key in ("coef", "std_err", "t_stats", "p_values", "variance_covariance"):
        np.testing.assert_allclose(trained[key], serial[key if key != "variance_covariance" else "vcov"],
                                   rtol=1e-9, err_msg=key)
    assert trained["condition_no"] == pytest.approx(serial["condition_no"], rel=1e-9)
    import statsmodels.api as sm

    ref = sm.OLS(y, sm.add_constant(X)).fit()
    np.testing.assert_allclose(serial["coef"], ref.params, rtol=1e-9)
    np.testing.assert_allclose(serial["p_values"], ref.pvalues, rtol=1e-6)
    assert serial["condition_no"] == pytest.approx(ref.condition_number, rel=1e-6)
    # per-shard states (linregr_state: the aggregate's state itself), merged, are the table's
    halves = _aggregate(db, "SELECT (learnedidx.linregr_final(learnedidx.linregr_merge_states(a.s, b.s))).* FROM "
                            "(SELECT learnedidx.linregr_state(y, ARRAY[1]::float8[] || x) AS s FROM pa "
                            "WHERE id % 2 = 0) a, (SELECT learnedidx.linregr_state(y, ARRAY[1]::float8[] || x) AS s "
                            "FROM pa WHERE id % 2 = 1) b")
    np.testing.assert_allclose(halves["coef"], serial["coef"], rtol=1e-9)
    assert halves["num_processed"] == n


@pytest.mark.postgres
def test_the_aggregate_refuses_bytes_that_are_no_state_rows_of_two_widths_and_too_many_variables(db):
    with pytest.raises(psycopg.errors.InvalidBinaryRepresentation, match="not a linregr state"):
        db.execute("SELECT learnedidx.linregr_final('\\x0100020000'::learnedidx.bytea8)")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="inconsistent numbers of independent variables"):
        db.execute("SELECT learnedidx.linregr(y, x) FROM (VALUES (1.0, ARRAY[1.0, 2.0]), (2.0, ARRAY[1.0])) t(y, x)")
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="4097 independent variables: at most 4096"):
        db.execute("SELECT learnedidx.linregr(1, array_fill(1.0::float8, ARRAY[4097]))")
    # 4,096 variables: the final function's singular values take minutes; a statement timeout stops them
    db.execute("CREATE TABLE wide AS SELECT random() AS y, ARRAY(SELECT random() FROM generate_series(1, 4096) "
               "WHERE i > 0) AS x FROM generate_series(1, 3) i")
    db.execute("SET statement_timeout = '1s'")
    with pytest.raises(psycopg.errors.QueryCanceled):
        db.execute("SELECT learnedidx.linregr(y, x) FROM wide")
    db.execute("RESET statement_timeout")
    assert db.execute("SELECT learnedidx.linregr(y, x) IS NULL, learnedidx.linregr_final('') IS NULL FROM "
                      "(VALUES (NULL::float8, ARRAY[1.0]), (2.0, ARRAY[NULL::float8])) t(y, x)").fetchone() == \
        (True, True)


@pytest.mark.postgres
def test_statistics_without_degrees_of_freedom_are_null_and_the_breusch_pagan_test_is_statsmodels(db):
    """A group of one row has coefficients (the minimum-norm solution) and r2, and NULL (not
    NaN) standard errors, t statistics, p-values and variance-covariance: n - k is not positive.
    heteroskedasticity_option adds MADlib's bp_stats and bp_p_value (Koenker's n R^2 of the
    squared residuals on X, chi-squared with k - 1 degrees of freedom): statsmodels'."""
    db.execute("CREATE TABLE houses (id serial, tax int, bedroom real, bath real, price int, size int, lot int)")
    db.execute("INSERT INTO houses (tax, bedroom, bath, price, size, lot) VALUES " +
               ", ".join(str(r) for r in data.HOUSES))
    out = "learnedidx.linregr_train('houses', 'hm', 'price', 'ARRAY[1, tax, bath, size]', 'bedroom', true)"
    db.execute(f"SELECT * FROM {out}")
    cols = [r[0] for r in db.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'hm'::regclass AND attnum > 0 "
                                     "ORDER BY attnum").fetchall()]
    assert cols[:9] == ["bedroom", "coef", "r2", "std_err", "t_stats", "p_values", "condition_no", "bp_stats",
                        "bp_p_value"]
    one = db.execute("SELECT coef, std_err, t_stats, p_values, variance_covariance, r2 FROM hm WHERE bedroom = 4"
                     ).fetchone()
    (tax, bath, price, size), = [(r[0], r[2], r[3], r[4]) for r in data.HOUSES if r[1] == 4]
    x = np.array([1.0, tax, bath, size])
    np.testing.assert_allclose(one[0], x * price / (x @ x), rtol=1e-9)  # the minimum-norm solution
    assert one[1:5] == (None, None, None, None) and one[5] == 1.0
    assert db.execute("SELECT count(*) FROM hm WHERE 'NaN' = ANY(p_values) OR 'NaN' = ANY(std_err)").fetchone() == (0,)
    rows = np.array([r for r in data.HOUSES if r[1] == 3], float)
    X, yv = np.c_[np.ones(len(rows)), rows[:, [0, 2, 4]]], rows[:, 3]
    resid = yv - X @ np.linalg.lstsq(X, yv, rcond=None)[0]
    lm, lm_p, _, _ = het_breuschpagan(resid, X)
    bp = db.execute("SELECT bp_stats, bp_p_value FROM hm WHERE bedroom = 3").fetchone()
    assert bp == (pytest.approx(lm, rel=1e-8), pytest.approx(lm_p, rel=1e-8))
    agg = db.execute("SELECT (learnedidx.heteroskedasticity_test_linregr(price, ARRAY[1, tax, bath, size], m.coef)).* "
                     "FROM houses h JOIN hm m USING (bedroom) WHERE bedroom = 3").fetchone()
    assert agg == (pytest.approx(lm, rel=1e-8), pytest.approx(lm_p, rel=1e-8))
    # one model read from the pages, its residuals in a second pass
    rng = np.random.default_rng(2)
    X = rng.normal(size=(3000, 2))
    yv = X @ [1.0, -1.0] + rng.normal(size=3000) * (1 + np.abs(X[:, 0]))
    load(db, "het", X, yv)
    db.execute("SET learnedidx.reader = 'pages'")
    got = _fit(db, "linregr_train('het', 'het_m', 'y', 'features', NULL, true)", "het_m")
    db.execute("RESET learnedidx.reader")
    Xi = np.c_[np.ones(3000), X]
    lm, lm_p, _, _ = het_breuschpagan(yv - Xi @ np.linalg.lstsq(Xi, yv, rcond=None)[0], Xi)
    assert (got["bp_stats"], got["bp_p_value"]) == (pytest.approx(lm, rel=1e-8), pytest.approx(lm_p, rel=1e-8))
    assert db.execute("SELECT read_path, (timings->>'passes')::int FROM het_m_summary").fetchone() == ("pages", 1)


# ------------------------------------------------------------------ logregr as MADlib defines it
def _madlib_irls_stats(X: np.ndarray, coef: np.ndarray) -> np.ndarray:
    p = 1 / (1 + np.exp(-(X @ coef)))
    return np.sqrt(np.diag(np.linalg.inv((X.T * (p * (1 - p))) @ X)))


@pytest.mark.postgres
def test_logregr_stops_as_madlib_and_its_statistics_are_at_the_coefficients_returned(db):
    """MADlib's stopping rule (the summed log-likelihood's change) gives MADlib's iteration counts
    on its own test data (crime 6, grad_school 5, patients 5: MADlib 2.1's figures); the
    statistics are the Hessian's at the coefficients returned, also when max_iter stops it."""
    db.execute("CREATE TABLE crime (id serial, crimerat float8, maleteen int, south smallint, educ float8, "
               "police60 int, police59 int, labor int, males int, pop int, nonwhite int, unemp1 int, unemp2 int, "
               "median int, belowmed int)")
    db.execute("INSERT INTO crime (crimerat, maleteen, south, educ, police60, police59, labor, males, pop, nonwhite, "
               "unemp1, unemp2, median, belowmed) VALUES " + ", ".join(str(r) for r in data.CRIME))
    db.execute("CREATE TABLE grad (admit int, gre int, gpa float8, rank int)")
    db.execute("INSERT INTO grad VALUES " + ", ".join(str(r) for r in data.GRAD_SCHOOL))
    db.execute("CREATE TABLE patients (id int, second_attack int, treatment int, trait_anxiety int)")
    db.execute("INSERT INTO patients VALUES " +
               ", ".join(str(r).replace("None", "NULL") for r in data.PATIENTS))
    for source, dep, indep, extra, want in [
        ("crime", "crimerat >= 110", "array[1, maleteen, south, educ, police59]", "", 6),
        ("grad", "admit", "ARRAY[1, gre, gpa, (rank = 2)::int, (rank = 3)::int, (rank = 4)::int]", "", 5),
        ("patients", "second_attack", "ARRAY[1, treatment, trait_anxiety]", "", 5),
        ("patients", "second_attack", "ARRAY[1, treatment, trait_anxiety]", ", NULL, 2", 2),
    ]:
        got = _fit(db, f"logregr_train('{source}', 'lr', '{dep}', '{indep}'{extra})", "lr")
        db.execute("DROP TABLE lr, lr_summary")
        assert got["num_iterations"] == want, (source, extra)
        X = np.array([r[0] for r in db.execute(f"SELECT {indep}::float8[] FROM {source} WHERE ({dep}) IS NOT NULL "
                                               f"AND array_position({indep}::float8[], NULL) IS NULL").fetchall()])
        np.testing.assert_allclose(got["std_err"], _madlib_irls_stats(X, np.array(got["coef"])), rtol=1e-9)


def _madlib_cg(X, y, iterations):
    """MADlib's conjugate gradient (logistic.cpp), transcribed."""
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    ys = 2 * y - 1
    c, grad, d = np.zeros(X.shape[1]), None, None
    for _ in range(iterations):
        z = X @ c
        g = (sig(-ys * z) * ys) @ X
        H = (X.T * (sig(z) * sig(-z))) @ X
        if grad is None:
            d = g
        else:
            diff = g - grad
            beta = 0.0 if (g @ diff) / (grad @ grad) <= np.finfo(float).smallest_subnormal else (g @ diff) / (d @ diff)
            d = g - beta * d
        grad = g
        c = c + (grad @ d) / (d @ H @ d) * d
    return c


def _madlib_igd(X, y, iterations):
    """MADlib's incremental gradient (logistic.cpp): its first iteration steps by 0."""
    c = np.zeros(X.shape[1])
    for _ in range(iterations - 1):
        for xi, yi in zip(X, y):
            c += 0.01 * (yi - 1 / (1 + np.exp(-xi @ c))) * xi
    return c


@pytest.mark.postgres
def test_cg_and_igd_are_madlibs(db):
    """'cg' and 'igd' as MADlib's logistic.cpp defines them (transcribed as the oracle; the
    side-by-side run of test_madlib_installcheck.py compares them with MADlib itself)."""
    rows = np.array(data.GRAD_SCHOOL, float)
    X = np.c_[np.ones(len(rows)), rows[:, 1] / 800, rows[:, 2] / 4]
    y = rows[:, 0]
    load(db, "gs", X[:, 1:], y)
    for optimizer, iterations, oracle in (("cg", 12, _madlib_cg), ("igd", 7, _madlib_igd)):
        got = _fit(db, f"logregr_train('gs', 'gs_{optimizer}', 'y', 'features', NULL, {iterations}, "
                       f"'{optimizer}', 0)", f"gs_{optimizer}")
        assert got["num_iterations"] == iterations
        np.testing.assert_allclose(got["coef"], oracle(X, y, iterations), rtol=1e-9, err_msg=optimizer)
        np.testing.assert_allclose(got["std_err"], _madlib_irls_stats(X, np.array(got["coef"])), rtol=1e-9)


# ------------------------------------------------------------------ the C numerics
def test_student_t_and_chi_squared_tails_are_scipys(tmp_path):
    """The extension's p-values (qr.c): Student's t two-sided tail for 1 to 1e8 degrees of
    freedom and the chi-squared tail, within 1e-10 of scipy's (boost's, as MADlib's)."""
    pg_config = os.path.join(PG_BINDIR, "pg_config")
    include = subprocess.run([pg_config, "--includedir-server"], capture_output=True, text=True, check=True).stdout
    main = tmp_path / "tails.c"
    main.write_text('#include <stdio.h>\ndouble lx_student_t_sf2(double, double); double lx_chi2_sf(double, double);\n'
                    'int main(void) { char k; double a, b; while (scanf(" %c %lf %lf", &k, &a, &b) == 3) '
                    'printf("%.17g\\n", k == \'t\' ? lx_student_t_sf2(a, b) : lx_chi2_sf(a, b)); return 0; }\n')
    exe = tmp_path / "tails"
    subprocess.run(["gcc", "-O2", "-I", include.strip(), "-I", str(EXTENSION), "-o", str(exe), str(main),
                    str(EXTENSION / "qr.c"), "-lm"], check=True, capture_output=True)
    cases = [("t", t, df) for df in (1, 2, 3, 5, 10, 30, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8)
             for t in (0, 0.01, 0.5, 1, 1.7, 1.75, 2, 2.9, 3, 5, 8, 12, 20, 40, 1e3)]
    cases += [("c", x, df) for df in (1, 2, 3, 5, 10, 30) for x in (0, 1e-6, 0.5, 1, 2, 5, 10, 50, 300)]
    out = subprocess.run([str(exe)], input="\n".join(f"{k} {a!r} {b!r}" for k, a, b in cases), capture_output=True,
                         text=True, check=True).stdout.split()
    for (kind, a, b), got in zip(cases, map(float, out)):
        want = 2 * stats.t.sf(abs(a), b) if kind == "t" else stats.chi2.sf(a, b)
        assert got == pytest.approx(want, rel=1e-10, abs=1e-300), (kind, a, b)


# ------------------------------------------------------------------ help, names, predict
HELPED = ["linregr_train", "logregr_train", "svm_classification", "svm_train", "lmf_train", "train", "predict",
          "predict_proba", "predict_table", "linregr_predict", "logregr_predict", "logregr_predict_prob",
          "svm_regression", "svm_one_class", "svm_predict"]


@pytest.mark.postgres
def test_every_training_and_prediction_function_answers_for_help(db):
    """fn(), fn('usage') and fn('example') answer with text, as MADlib's do; the usage names every
    argument of the function (its longest signature), the example calls it; any other message
    says how to ask."""
    for fn in HELPED:
        summary, usage, example, other = db.execute(
            f"SELECT learnedidx.{fn}(), learnedidx.{fn}('usage'), learnedidx.{fn}('example'), "
            f"learnedidx.{fn}('nonsense')").fetchone()
        assert f"learnedidx.{fn}('usage')" in summary and f"learnedidx.{fn}(" in usage and f"learnedidx.{fn}(" in example
        assert other == f'No such option. Use "SELECT learnedidx.{fn}()" for help.'
        args = db.execute("SELECT proargnames FROM pg_proc WHERE pronamespace = 'learnedidx'::regnamespace "
                          "AND proname = %s AND pronargs > 1 ORDER BY pronargs DESC LIMIT 1", (fn,)).fetchone()
        for arg in (args[0] or []) if args else []:
            assert arg in usage, (fn, arg)


@pytest.mark.postgres
def test_madlibs_relative_error_and_assert_for_its_install_check(db):
    """relative_error is MADlib's: |a - v| / |v|, for arrays ||a - v|| / ||v|| (numpy's 2-norms),
    arrays of two lengths an error (22023); assert fails on false and on NULL (P0004)."""
    a, v = [1.5, -2.0, 7.25], [1.0, -2.5, 7.0]
    got = db.execute("SELECT learnedidx.relative_error(%s::float8[], %s::float8[]), "
                     "learnedidx.relative_error(2.5, -2.0)", (a, v)).fetchone()
    assert got == (pytest.approx(np.linalg.norm(np.subtract(a, v)) / np.linalg.norm(v), rel=1e-15),
                   pytest.approx(2.25))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="same length"):
        db.execute("SELECT learnedidx.relative_error(ARRAY[1.0, 2.0], ARRAY[1.0])")
    db.execute("SELECT learnedidx.assert(learnedidx.relative_error(1.01, 1) < 0.02, 'close')")
    for condition in ("false", "NULL"):
        with pytest.raises(psycopg.errors.AssertFailure, match="Failed assertion: m"):
            db.execute(f"SELECT learnedidx.assert({condition}, 'm')")


@pytest.mark.postgres
def test_madlibs_svm_functions_answer_for_params_and_kernels(db):
    """MADlib's svm training functions also answer 'params', 'gaussian' and 'polynomial': every
    param svm_params takes, and every kernel_params name of the kernel (as the summary table
    writes them), named; the summary says how to ask."""
    from learnedidx.indb.udf import svm_params
    kernels = {k: [item.split("=")[0].strip() for item in svm_params.kernel_params_text(
        k, svm_params.kernel_params(k, None, 2)).split(",")] for k in ("gaussian", "polynomial")}
    assert "fit_in_memory" in kernels["gaussian"] and "degree" in kernels["polynomial"]
    for fn in ("svm_classification", "svm_regression", "svm_one_class"):
        summary, params, gaussian, polynomial = db.execute(
            f"SELECT learnedidx.{fn}(), learnedidx.{fn}('params'), learnedidx.{fn}('Gaussian'), "
            f"learnedidx.{fn}('polynomial')").fetchone()
        for message in ("params", "gaussian", "polynomial"):
            assert f"learnedidx.{fn}('{message}')" in summary
        assert [p for p in svm_params.PARAMS if p not in params] == []
        for kernel, text in (("gaussian", gaussian), ("polynomial", polynomial)):
            assert text.startswith(f"kernel_params of the {kernel} kernel")
            assert [p for p in kernels[kernel] if p not in text] == [], (fn, kernel)


@pytest.mark.postgres
def test_temporary_models_in_a_fresh_session_and_predicts_leading_one(db):
    """'pg_temp.m' works in a session that has made no temporary table yet (it was 3F000); the
    leading-1 form of predict's features must start with 1."""
    db.execute("CREATE TABLE lt (y float8, x1 float8, x2 float8)")
    db.execute("INSERT INTO lt SELECT 3 + 2 * i - (i % 7), i, i % 7 FROM generate_series(1, 50) i")
    assert db.execute("SELECT pg_my_temp_schema()::int").fetchone() == (0,)
    db.execute("SELECT * FROM learnedidx.linregr_train('lt', 'pg_temp.m', 'y', 'x1, x2')")
    assert db.execute("SELECT learnedidx.predict('pg_temp.m', ARRAY[10, 3]), "
                      "learnedidx.predict('pg_temp.m', ARRAY[1, 10, 3])").fetchone() == \
        (pytest.approx(20.0), pytest.approx(20.0))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="start with its 1, not 2"):
        db.execute("SELECT learnedidx.predict('pg_temp.m', ARRAY[2, 10, 3])")
    db.execute("SELECT * FROM learnedidx.linregr_train('lt', 'pg_temp.n', 'y', 'x1, x2', \"intercept\" => false)")
    assert db.execute("SELECT learnedidx.predict('pg_temp.n', ARRAY[2, 10])").fetchone()[0] is not None
