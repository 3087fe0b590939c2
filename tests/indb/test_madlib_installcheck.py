"""MADlib 2.1's own install-check tests of linear and logistic regression, translated.

MADlib's src/ports/postgres/modules/regress/test/linear.sql_in, linear.ic.sql_in,
logistic.sql_in and logistic.ic.sql_in, statement by statement: the same calls, arguments and
expected values, unqualified as MADlib writes them, run with only the schema changed
(``search_path = public, learnedidx`` where MADlib's run has its own schema).  Every test
statement must run and every assertion hold.  ``assert`` and ``relative_error``, MADlib's
utilities the tests call, are the extension's (its ``assert`` fails on NULL, which MADlib's
passes).

With ``LEARNEDIDX_MADLIB_PREFIX=PREFIX`` (MADlib built as docs/indb.md says), the same statements
also run against MADlib itself, installed by its madpack into a database of the test cluster
(``search_path = public, madlib``), and :func:`test_models_match_madlibs_side_by_side` compares the
two engines' output tables; without it those are skipped (the project's tests need no MADlib).
"""
from __future__ import annotations

import json
from typing import NamedTuple

import numpy as np
import psycopg
import pytest

from tests.indb import madlib_regress_data as data
from tests.indb.conftest import MADLIB_PREFIX, install_madlib, own_database

pytestmark = pytest.mark.postgres

class Step(NamedTuple):
    sql: str
    test: bool = True  # one of MADlib's test statements (counted), else setting up


def setup(sql: str) -> Step:
    return Step(sql, False)


def _values(rows) -> str:
    def lit(v):
        return "NULL" if v is None else repr(v)
    return ", ".join("(%s)" % ", ".join(lit(v) for v in r) for r in rows)


HOUSES_TABLE = ("CREATE TABLE houses (id serial NOT NULL, tax integer, bedroom real, bath real, price integer, "
                "size integer, lot integer)")
HOUSES = f"INSERT INTO houses (tax, bedroom, bath, price, size, lot) VALUES {_values(data.HOUSES)}"
HOUSES_JSON = [dict(zip(("ta,x", "bedroom", "ba$th", "pr'ice", "size", "lot"), r)) for r in data.HOUSES]
JSON_IDS = [2, 4, 1, 6, 3, 5, 7, 10, 9, 8, 11, 12, 13, 14, 15]  # MADlib's ids of the rows, in its order

#: bedroom = 2 and 3 of houses, with the Breusch-Pagan test (both of MADlib's groups' figures)
BEDROOM_2 = """relative_error(coef, array[-84242.0345, 55.4430, -78966.9754, 225.6119]) < 1e-2 and
    relative_error(r2, 0.9688) < 1e-2 and
    relative_error(std_err, array[35019.00, 19.57, 23036.81, 49.04]) < 1e-2 and
    relative_error(t_stats, array[-2.406, 2.833, -3.428, 4.600]) < 1e-2 and
    relative_error(p_values, array[0.251, 0.216, 0.181, 0.136]) < 1e-2 and
    relative_error(condition_no, 10086.1) < 1e-2 and
    relative_error(bp_stats, 2.5451) < 1e-2 and
    relative_error(bp_p_value, 0.467192) < 1e-2"""

LINEAR = [
    setup("CREATE TABLE weibull (id integer NOT NULL, x1 float8, x2 float8, y float8)"),
    setup(f"INSERT INTO weibull (id, x1, x2, y) VALUES {_values(data.WEIBULL)}"),
    Step("""SELECT assert(
    relative_error(coef, ARRAY[-153.51, 1.24, 12.08]) < 1e-4 AND
    relative_error(t_stats[2], 3.1393) < 1e-4 AND relative_error(t_stats[3], 3.0726) < 1e-4 AND
    relative_error(p_values[3], 0.0083) < 1e-2, 'Linear regression (weibull.com test): Wrong results')
FROM (SELECT (linregr(y, ARRAY[1, x1, x2])).* FROM weibull) q"""),
    setup("CREATE TABLE unm (id integer NOT NULL, x1 float8, x2 float8, y float8)"),
    setup(f"INSERT INTO unm (id, x1, x2, y) VALUES {_values(data.UNM)}"),
    Step("""SELECT assert(relative_error(coef, ARRAY[9.69, 2.09, 1.50]) < 1e-2,
    'Linear regression (unm): Wrong coefficients')
FROM (SELECT (linregr(y, ARRAY[1, x1, x2])).* FROM unm) q"""),
    setup(HOUSES_TABLE),
    setup(HOUSES),
    Step("""SELECT assert(
    relative_error(coef, ARRAY[27923.43, -35524.78, 2269.34, 130.79]) < 1e-4 AND
    relative_error(r2, 0.74537) < 1e-3 AND
    relative_error(std_err, ARRAY[56306, 25037, 22208, 36.209]) < 1e-4 AND
    relative_error(t_stats, ARRAY[0.49592, -1.4189, 0.10218, 3.6122]) < 1e-4 AND
    relative_error(p_values, ARRAY[0.62971, 0.18363, 0.92045, 0.0040816]) < 1e-4 AND
    relative_error(condition_no, 9783.0184) < 1e-4, 'Linear regression (houses): Wrong results')
FROM (SELECT (linregr(price, array[1, bedroom, bath, size])).* FROM houses) q"""),
    # the merge function on the aggregate's initial state, from either side
    Step("""SELECT assert((linregr).r2 = 1, 'Linear regression failed on singleton data set.')
FROM (SELECT linregr_final(linregr_merge_states(linregr_transition(CAST('' AS bytea8), 3, ARRAY[5,2]),
                                                CAST('' AS bytea8))) AS linregr) ignored"""),
    Step("""SELECT assert((linregr).r2 = 1, 'Linear regression failed on singleton data set.')
FROM (SELECT linregr_final(linregr_merge_states(CAST('' AS bytea8),
                                                linregr_transition(CAST('' AS bytea8), 3, ARRAY[5,2]))) AS linregr)
    ignored"""),
    setup("DROP TABLE IF EXISTS result_lin_houses, result_lin_houses_summary"),
    Step("SELECT linregr_train('houses', 'result_lin_houses', 'price', 'array[1, tax, bath, size]', 'bedroom', True)"),
    Step(f"""SELECT assert({BEDROOM_2},
    'Linear regression with heteroskedasticity & grouping (houses): Wrong results')
FROM result_lin_houses WHERE bedroom = 2"""),
    Step("""SELECT assert(
    relative_error(coef, array[-88155.8292502747, 27.1966436293179, 41404.0293389239, 62.6375210724027]) < 1e-2 and
    relative_error(r2, 0.841699901312963) < 1e-2 and
    relative_error(std_err, array[57867.9999699512, 17.82723091538, 43643.1321521931, 70.8506824870639]) < 1e-2 and
    relative_error(t_stats, array[-1.52339512850022, 1.52556747362568, 0.948695185179172, 0.884077878626493])
        < 1e-2 and
    relative_error(p_values, array[0.18816143289241, 0.187636685729725, 0.38634003235866, 0.417132778730133])
        < 1e-2 and
    relative_error(condition_no, 11722.62) < 1e-2 and
    relative_error(bp_stats, 6.753838) < 1e-2 and
    relative_error(bp_p_value, 0.08017) < 1e-2,
    'Linear regression with heteroskedasticity & grouping (houses): Wrong results')
FROM result_lin_houses WHERE bedroom = 3"""),
    Step("""SELECT id, linregr_predict(coef, ARRAY[1, tax, bath, size]) AS pred_value
FROM houses h, result_lin_houses m ORDER BY id"""),
    setup("DROP TABLE IF EXISTS result_lin_houses CASCADE"),
    Step("SELECT linregr_train()"),
    Step("SELECT linregr_train('usage')"),
    Step("SELECT linregr_train('example')"),
    Step("SELECT linregr_predict()"),
    Step("SELECT linregr_predict('usage')"),
    Step("SELECT linregr_predict('example')"),
    # grouping by a JSON expression, special characters in the keys (MADlib's function takes
    # this branch on every server with json, PostgreSQL 15's)
    setup("CREATE TABLE houses_json (id serial NOT NULL, data json)"),
    setup("INSERT INTO houses_json VALUES " + ", ".join(
        "(%d, '%s')" % (i, json.dumps(r).replace("'", "''")) for i, r in zip(JSON_IDS, HOUSES_JSON))),
    setup(f"""CREATE FUNCTION linereg_expr_test() RETURNS void AS $$
BEGIN
    DROP TABLE IF EXISTS result_lin_houses_json;
    DROP TABLE IF EXISTS result_lin_houses_json_summary;
    PERFORM linregr_train('houses_json', 'result_lin_houses_json', '(data->>''pr''''ice'')::integer',
        'array[1, (data->>''ta,x'')::integer, (data->>''ba$th'')::double precision, (data->>''size'')::integer]',
        'data->>''bedroom''', True);
    PERFORM assert({BEDROOM_2}, 'Linear regression with heteroskedasticity & grouping (houses): Wrong results')
    FROM result_lin_houses_json WHERE "data->>'bedroom'"::integer = 2;
END $$ LANGUAGE plpgsql""".replace("$$", "$f$")),
    Step("SELECT linereg_expr_test()"),
    setup("DROP TABLE IF EXISTS result_lin_houses, result_lin_houses_summary"),
    Step("SELECT linregr_train('houses', 'result_lin_houses', 'price', 'array[1, tax, bath, size]', NULL, True)"),
    Step("""SELECT assert(
    relative_error(coef, array[-12849.4168959872, 28.9613922651765, 10181.6290712648, 50.516894915354]) < 1e-2 and
    relative_error(r2, 0.768577580597443) < 1e-2 and
    relative_error(std_err, array[33453.0344331391, 15.8992104963997, 19437.7710925923, 32.928023174087]) < 1e-2 and
    relative_error(t_stats, array[-0.38410317968819, 1.82156166004184, 0.523806408809133, 1.53416118083605])
        < 1e-2 and
    relative_error(p_values, array[0.708223134615422, 0.0958005827189772, 0.610804093526536, 0.153235085548186])
        < 1e-2 and
    relative_error(condition_no, 9002.50) < 1e-2 and
    relative_error(bp_stats, 1.22605243985138) < 1e-2 and
    relative_error(bp_p_value, 0.746762880478034) < 1e-2,
    'Linear regression with heteroskedasticity with no grouping: Wrong results')
FROM result_lin_houses"""),
    # the function's other branch (servers without json): quoted special characters in columns
    setup("""CREATE TABLE houses_spcl (id serial NOT NULL, "ta,x" integer, "bed,room" real, "ba$th" real,
    "pr'ice" integer, size integer, lot integer)"""),
    setup("INSERT INTO houses_spcl (\"ta,x\", \"bed,room\", \"ba$th\", \"pr'ice\", size, lot) VALUES "
          + _values(data.HOUSES)),
    setup("DROP TABLE IF EXISTS result_lin_houses_spcl, result_lin_houses_spcl_summary"),
    setup("""SELECT linregr_train('houses_spcl', 'result_lin_houses_spcl', '"pr''ice"',
    'array[1, "ta,x", "ba$th", size]', '"bed,room"', True)"""),
    setup(f"""SELECT assert({BEDROOM_2},
    'Linear regression with heteroskedasticity & grouping (houses): Wrong results')
FROM result_lin_houses_spcl WHERE result_lin_houses_spcl."bed,room" = 2"""),
]

LINEAR_IC = [
    setup("DROP TABLE IF EXISTS weibull"),
    setup("CREATE TABLE weibull (id integer NOT NULL, x1 float8, x2 float8, y float8)"),
    setup(f"INSERT INTO weibull (id, x1, x2, y) VALUES {_values(data.WEIBULL[:5])}"),
    Step("SELECT (linregr(y, ARRAY[1, x1, x2])).* FROM weibull"),
]

#: the patients test's figures (the source's coefficients; the rest computed with MADlib's IRLS)
PATIENTS_IRLS = """relative_error(coef, ARRAY[-6.36, -1.02, 0.119]) < 1e-3 AND
    relative_error(log_likelihood, -9.41) < 1e-3 AND
    relative_error(std_err, ARRAY[3.21, 1.17, 0.0550]) < 0.002 AND
    relative_error(z_stats, ARRAY[-1.98, -0.874, 2.17]) < 0.002 AND
    relative_error(p_values, ARRAY[0.0477, 0.382, 0.0304]) < 1e-3 AND
    relative_error(odds_ratios, ARRAY[0.00172, 0.359, 1.13]) < 0.004 AND
    relative_error(condition_no, sqrt(106329)) < 1e-2 AND
    num_rows_processed = 20 AND num_missing_rows_skipped = 3"""
PATIENTS_TRAIN = ("SELECT logregr_train('{source}', 'temp_result', 'second_attack', "
                  "'ARRAY[1, treatment, trait_anxiety]', Null, 20, 'irls')")
GRAD_FEATURES = "ARRAY[1, gre, gpa, (rank = 2)::INT::FLOAT8, (rank = 3)::INT::FLOAT8, (rank = 4)::INT::FLOAT8]"
CRIME_COLUMNS = ("crimerat, maleteen, south, educ, police60, police59, labor, males, pop, nonwhite, unemp1, unemp2, "
                 "median, belowmed")
DROP_RESULT = setup("DROP TABLE IF EXISTS temp_result, temp_result_summary")

LOGISTIC = [
    setup("DROP TABLE IF EXISTS patients CASCADE"),
    setup("CREATE TABLE patients (id integer NOT NULL, second_attack integer, treatment integer, "
          "trait_anxiety integer)"),
    setup(f"INSERT INTO patients (id, second_attack, treatment, trait_anxiety) VALUES {_values(data.PATIENTS)}"),
    setup("CREATE VIEW patients_view AS (SELECT * FROM patients)"),
    DROP_RESULT,
    Step(PATIENTS_TRAIN.format(source="patients")),
    Step(f"SELECT assert({PATIENTS_IRLS}, 'Logistic regression with IRLS optimizer (patients test): Wrong results') "
         "FROM temp_result"),
    DROP_RESULT,
    Step(PATIENTS_TRAIN.format(source="patients_view")),
    Step(f"SELECT assert({PATIENTS_IRLS}, 'Logistic regression with IRLS optimizer (patients test): Wrong results') "
         "FROM temp_result"),
    DROP_RESULT,
    Step("SELECT logregr_train('patients', 'temp_result', 'second_attack', 'ARRAY[1, treatment, trait_anxiety]', "
         "Null, 200, 'cg', 0)"),
    Step("""SELECT assert(
    relative_error(coef, ARRAY[-6.36, -1.02, 0.119]) < 0.04 AND
    relative_error(log_likelihood, -9.41) < 1e-3 AND
    relative_error(std_err, ARRAY[3.21, 1.17, 0.0550]) < 0.02 AND
    relative_error(z_stats, ARRAY[-1.98, -0.874, 2.17]) < 0.02 AND
    relative_error(p_values, ARRAY[0.0477, 0.382, 0.0304]) < 0.03 AND
    relative_error(odds_ratios, ARRAY[0.00172, 0.359, 1.13]) < 0.01 AND
    relative_error(condition_no, sqrt(106329)) < 0.02 AND
    num_rows_processed = 20 AND num_missing_rows_skipped = 3, 'Logistic regression (patients test): Wrong results')
FROM temp_result"""),
    setup("DROP TABLE IF EXISTS crime"),
    setup("CREATE TABLE crime (id serial NOT NULL, crimerat float8, maleteen integer, south smallint, educ float8, "
          "police60 integer, police59 integer, labor integer, males integer, pop integer, nonwhite integer, "
          "unemp1 integer, unemp2 integer, median integer, belowmed integer)"),
    setup(f"INSERT INTO crime ({CRIME_COLUMNS}) VALUES {_values(data.CRIME)}"),
    DROP_RESULT,
    Step("SELECT logregr_train('crime', 'temp_result', 'crimerat >= 110', 'array[1, maleteen, south, educ, police59]')"),
    Step("""SELECT assert(
    relative_error(coef, ARRAY[-17.70177, .0833837, -1.117091, .0229224, .0581834]) < 1e-5 AND
    relative_error(log_likelihood, -18.606959) < 1e-5 AND
    relative_error(std_err, ARRAY[9.495993, .0440353, 1.359616, .5594047, .0210049]) < 1e-5 AND
    relative_error(z_stats, ARRAY[-1.864, 1.894, -0.822, 0.041, 2.770]) < 1e-3 AND
    relative_error(p_values, ARRAY[0.062, 0.058, 0.411, 0.967, 0.006]) < 1e-3 AND
    relative_error(odds_ratios, ARRAY[exp(-17.70177), 1.086959, .3272305, 1.023187, 1.059909]) < 1e-5 AND
    relative_error(condition_no, sqrt(14513863)) < 1e-2,
    'Logistic regression with IRLS optimizer (crime): Wrong results')
FROM temp_result"""),
    setup("DROP TABLE IF EXISTS grad_school, grad_school_summary"),
    setup("CREATE TABLE grad_school (id serial NOT NULL, admit integer, gre integer, gpa float8, rank integer)"),
    setup(f"INSERT INTO grad_school (admit, gre, gpa, rank) VALUES {_values(data.GRAD_SCHOOL)}"),
    DROP_RESULT,
    Step(f"SELECT logregr_train('grad_school', 'temp_result', 'admit', '{GRAD_FEATURES}')"),
    Step("""SELECT assert(
    relative_error(coef, ARRAY[-3.989979, 0.002264, 0.804038, -0.675443, -1.340204, -1.551464]) < 1e-5 AND
    relative_error(log_likelihood, -229.2587) < 1e-5 AND
    relative_error(std_err, ARRAY[1.139951, 0.001094, 0.331819, 0.316490, 0.345306, 0.417832]) < 1e-5 AND
    relative_error(z_stats, ARRAY[-3.500, 2.070, 2.423, -2.134, -3.881, -3.713]) < 1e-3 AND
    relative_error(p_values, ARRAY[0.000465, 0.038465, 0.015388, 0.032829, 0.000104, 0.000205]) < 1e-3 AND
    relative_error(odds_ratios, ARRAY[0.0185001, 1.0022670, 2.2345448, 0.5089310, 0.2617923, 0.2119375]) < 1e-5 AND
    relative_error(condition_no, 6379.028) < 1e-2,
    'Logistic regression with IRLS optimizer (grad_school): Wrong results')
FROM temp_result"""),
    Step(f"SELECT logregr_predict(coef, {GRAD_FEATURES}) FROM temp_result, grad_school"),
    Step(f"SELECT logregr_predict_prob(coef, {GRAD_FEATURES}) FROM temp_result, grad_school"),
    DROP_RESULT,
    Step(f"SELECT logregr_train('grad_school', 'temp_result', 'admit', '{GRAD_FEATURES}', Null, 20, 'cg', 0)"),
    setup("INSERT INTO grad_school (admit, gre, gpa, rank) VALUES (NULL, NULL, 3, 4), (1, NULL, 3, 5)"),
    DROP_RESULT,
    Step("SELECT logregr_train('grad_school', 'temp_result', 'admit', 'ARRAY[1, gre, gpa]', 'rank')"),
]

LOGISTIC_IC = [
    setup("DROP TABLE IF EXISTS patients CASCADE"),
    setup("CREATE TABLE patients (id integer NOT NULL, second_attack integer, treatment integer, "
          "trait_anxiety integer)"),
    setup(f"INSERT INTO patients (id, second_attack, treatment, trait_anxiety) VALUES {_values(data.PATIENTS[:6])}"),
    DROP_RESULT,
    Step("SELECT logregr_train('patients', 'temp_result', 'second_attack', 'ARRAY[1, treatment]', Null, 2, 'irls')"),
]

#: MADlib's file -> its statements; 34 test statements in all.
FILES = {"linear.sql_in": LINEAR, "linear.ic.sql_in": LINEAR_IC, "logistic.sql_in": LOGISTIC,
         "logistic.ic.sql_in": LOGISTIC_IC}


def run(conn: psycopg.Connection, steps: list[Step]) -> list[tuple[str, str | None]]:
    """Run ``steps`` in order: (statement, its error or None) of each test statement; a setup
    statement that fails fails at once."""
    out = []
    for step in steps:
        try:
            conn.execute(step.sql).fetchall() if step.test else conn.execute(step.sql)
            error = None
        except psycopg.Error as exc:
            if not step.test:
                raise
            error = f"{exc.sqlstate}: {exc.diag.message_primary}"
        if step.test:
            out.append((step.sql, error))
    return out


def _engine_database(engine: str, proc, accel_server, name: str = "installcheck") -> psycopg.Connection:
    """Database ``name_engine`` of the test cluster, where MADlib's unqualified calls reach ``engine``."""
    if engine == "madlib" and not MADLIB_PREFIX:
        pytest.skip("MADlib side by side: set LEARNEDIDX_MADLIB_PREFIX to MADlib's install prefix")
    conn = own_database(proc, f"{name}_{engine}")
    if engine == "learnedidx":
        conn.execute("CREATE EXTENSION learnedidx CASCADE")
        conn.execute("SELECT set_config('learnedidx.socket', %s, false)", (accel_server.socket_path,))
    else:
        install_madlib(conn, proc)
    conn.execute(f"SET search_path = public, {engine}")
    return conn


@pytest.fixture(scope="module", params=["learnedidx", "madlib"])
def engine(request, postgresql_proc, accel_server):
    """(engine name, connection): one database per engine for the module."""
    conn = _engine_database(request.param, postgresql_proc, accel_server)
    yield request.param, conn
    conn.close()


@pytest.fixture(scope="module")
def results(engine):
    """Every file run once, in MADlib's order: file -> [(statement, error)]."""
    name, conn = engine
    return {file: run(conn, steps) for file, steps in FILES.items()}


@pytest.mark.parametrize("file", FILES)
def test_madlibs_install_check_file_passes(results, file):
    failed = [(sql.splitlines()[0], error) for sql, error in results[file] if error]
    assert failed == []
    assert len(results[file]) == {"linear.sql_in": 18, "linear.ic.sql_in": 1, "logistic.sql_in": 14,
                                  "logistic.ic.sql_in": 1}[file]


# ------------------------------------------------------------------ side by side with MADlib
#: Training calls of the files (and MADlib's igd, which its tests leave out), each into its own
#: output table, on the datasets as the files leave them.
CALLS = [  # (call, MADlib's max_iter of a logregr call)
    ("linregr_train('houses', '{out}', 'price', 'array[1, tax, bath, size]', 'bedroom', True)", None),
    ("linregr_train('houses', '{out}', 'price', 'array[1, tax, bath, size]', NULL, True)", None),
    ("linregr_train('houses_json', '{out}', '(data->>''pr''''ice'')::integer', 'array[1, (data->>''ta,x'')::integer, "
     "(data->>''ba$th'')::double precision, (data->>''size'')::integer]', 'data->>''bedroom''', True)", None),
    ("logregr_train('crime', '{out}', 'crimerat >= 110', 'array[1, maleteen, south, educ, police59]')", 20),
    (f"logregr_train('grad_school', '{{out}}', 'admit', '{GRAD_FEATURES}')", 20),
    (f"logregr_train('grad_school', '{{out}}', 'admit', '{GRAD_FEATURES}', Null, 20, 'cg', 0)", 20),
    ("logregr_train('grad_school', '{out}', 'admit', 'ARRAY[1, gre, gpa]', 'rank')", 20),
    ("logregr_train('crime', '{out}', 'crimerat >= 110', 'array[1, maleteen, south, educ, police59]', NULL, 5, "
     "'igd', 0)", 5),
    ("logregr_train('grad_school', '{out}', 'admit', 'ARRAY[1, gre / 800.0, gpa / 4.0, (rank = 2)::INT::FLOAT8]', "
     "NULL, 30, 'igd', 0)", 30),
    ("logregr_train('patients', '{out}', 'second_attack', 'ARRAY[1, treatment, trait_anxiety]', Null, 200, 'cg', 0)",
     200),
    ("logregr_train('patients', '{out}', 'second_attack', 'ARRAY[1, treatment]', Null, 2, 'irls')", 2),
]


@pytest.fixture(scope="module")
def side_by_side(postgresql_proc, accel_server):
    """Both engines' databases, each with the files run: (learnedidx's, MADlib's)."""
    if not MADLIB_PREFIX:
        pytest.skip("MADlib side by side: set LEARNEDIDX_MADLIB_PREFIX to MADlib's install prefix")
    conns = [_engine_database(e, postgresql_proc, accel_server, "side_by_side") for e in ("learnedidx", "madlib")]
    for conn in conns:
        for steps in FILES.values():
            run(conn, steps)
    yield conns
    for conn in conns:
        conn.close()


def _table(conn: psycopg.Connection, table: str) -> dict[str, list]:
    cur = conn.execute(f"SELECT * FROM {table} ORDER BY 1")
    rows = cur.fetchall()
    return {d.name: [r[i] for r in rows] for i, d in enumerate(cur.description)}


@pytest.mark.parametrize("call,max_iter", CALLS)
def test_models_match_madlibs_side_by_side(side_by_side, call, max_iter):
    """Every column MADlib writes, as MADlib computes it.  Counts and iterations are equal (MADlib
    counts one iteration of a group without rows, which learnedidx does not train: NULL);
    coefficients within 1e-8 (cg's, iterated 200 times, 1e-6); linregr's statistics within 1e-8
    (MADlib solves X'X), except that learnedidx leaves those without degrees of freedom NULL (a
    group of fewer rows than coefficients: MADlib's unsigned n - k wraps around to zero standard
    errors); logregr's statistics within 1e-4 when it converged (learnedidx's at the coefficients
    it returns, MADlib's at the start of its last iteration, which convergence makes close; after
    max_iter they differ by the last step)."""
    ours, theirs = side_by_side
    out = f"sbs_{[c for c, _ in CALLS].index(call)}"
    for conn in (ours, theirs):
        conn.execute(f"SELECT {call.format(out=out)}")
    mine, madlib = _table(ours, out), _table(theirs, out)
    assert set(madlib) <= set(mine)
    for column, want in madlib.items():
        got = mine[column]
        if column in ("num_rows_processed", "num_missing_rows_skipped", "num_iterations") or \
                not isinstance(want[0], (float, list)):
            if column == "num_iterations":
                got = [1 if c is None else g for g, c in zip(got, mine["coef"])]
            assert got == want, column
            continue
        for i, (g, w) in enumerate(zip(got, want)):
            if w is None or (g is None and mine["num_rows_processed"][i] <= len(mine["coef"][i] or [])):
                assert (g is None) == (w is None) or column != "coef", column
                continue
            if column == "coef":
                rtol = 1e-6 if "'cg'" in call else 1e-8
            elif max_iter is None:
                rtol = 1e-8
            elif madlib["num_iterations"][i] < max_iter:
                rtol = 1e-4
            else:
                continue
            np.testing.assert_allclose(np.asarray(g, float), np.asarray(w, float), rtol=rtol, atol=1e-12,
                                       err_msg=f"{column} of {call}")
