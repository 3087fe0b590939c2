"""The PL/Python functions' modules (learnedidx/indb/udf), tested directly, and the thin SQL
wrappers over them: every plpython3u function of the script is the one prologue and a call, the
modules import nothing the database server's Python may lack, and an output column the
server's reply has no value for is an error, not a silent NULL."""
from __future__ import annotations

import ast
import math
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

import learnedidx
from learnedidx import errors
from learnedidx.indb import install
from learnedidx.indb.udf import args, catalog, madlib_params, outputs, selectlist, svm_kernels, svm_params

ROOT = Path(learnedidx.__file__).resolve().parent
SCRIPT = ROOT.parent / "extension" / "learnedidx--0.1.sql"
PROLOGUE = '''import sys
if "learnedidx.indb.udf" not in sys.modules:  # the modules installed with the extension (docs/indb.md)
    sys.path.insert(0, plpy.execute("SELECT learnedidx._python_path() AS p")[0]["p"])
'''


# ------------------------------------------------------------------ select lists
def test_select_lists_split_at_top_level_commas_only():
    assert selectlist.split_top("a, f(b, c), x[1,2], 'd,e', \"q,r\" ,  ") == \
        ["a", "f(b, c)", "x[1,2]", "'d,e'", '"q,r"', ""]
    assert selectlist.split_top("") == [""]


def test_identifiers_fold_unless_quoted():
    assert selectlist.ident(" ZipCode ") == "zipcode"
    assert selectlist.ident('"Zip ""Code"""') == 'Zip "Code"'
    assert [selectlist.ident(s) for s in ("zip code", "a.b", "f(x)", "1x", "")] == [None] * 5


def test_madlibs_array_form_states_the_intercept():
    assert selectlist.feature_items("ARRAY[1, x1, x2]") == (["x1", "x2"], True)
    assert selectlist.feature_items("array [x1, 1]") == (["x1", "1"], True)  # MADlib: a 1 among the items
    assert selectlist.feature_items("ARRAY[x1, x2]") == (["x1", "x2"], False)
    assert selectlist.feature_items("x1, f(x2, 3)") == (["x1", "f(x2, 3)"], None)
    with pytest.raises(errors.SQLSyntaxError, match="indep lists an empty item") as e:
        selectlist.feature_items("x1,")
    assert e.value.sqlstate == "42601"


# ------------------------------------------------------------------ MADlib's parameter strings
def test_keyvalues_are_madlibs_name_value_pairs():
    assert madlib_params.keyvalues(" Max_Iter = 5, lambda='0.1',", "params") == {"max_iter": "5", "lambda": "0.1"}
    assert madlib_params.keyvalues(None, "params") == {}
    for bad in ("lambda", "=3"):
        with pytest.raises(errors.ParameterError, match="params must be name=value pairs"):
            madlib_params.keyvalues(bad, "params")


def test_madlib_params_take_lists_and_braces():
    """MADlib's cross-validation lists and class_weight mapping: a comma inside [], {} or () is
    the value's (split_top split class_weight={-1:1, 1:10} in two)."""
    assert selectlist.split_top("a={-1:1, 1:10}, b=[1, 2]") == ["a={-1:1, 1:10}", "b=[1, 2]"]
    p = svm_params.params("init_stepsize=[0.01, 1], lambda=[20, 0.0002, 0.02], class_weight={-1:1, 1:10}, "
                          "max_iter={5}, decay_factor=(0.5), n_folds=3", svc=True, grouped=False)
    assert (p["init_stepsize"], p["lambda"], p["class_weight"], p["max_iter"], p["decay_factor"]) == \
        ([0.01, 1.0], [20.0, 0.0002, 0.02], [("-1", 1.0), ("1", 10.0)], [5], [0.5])
    assert svm_params.params(None, svc=False, grouped=True) == {
        "init_stepsize": [0.01], "decay_factor": [0.9], "max_iter": [100], "tolerance": 1e-10, "lambda": [0.01],
        "norm": "l2", "n_folds": 0, "validation_result": "", "epsilon": [0.01], "eps_table": "", "class_weight": None}
    p = svm_params.params("class_weight=balanced, norm=L1, n_folds=3", True, False)  # no lists: no cross validation
    assert (p["class_weight"], p["norm"], p["n_folds"]) == ("balanced", "l1", 3)
    assert svm_params.kernel_params("gaussian", "gamma=1, fit_intercept=yes", 4) == {
        "n_components": 100, "fit_intercept": True, "random_state": 1, "degree": 3, "coef0": 1,
        "fit_in_memory": True, "gamma": 1.0}
    assert [svm_params.kernel_name(k) for k in (None, "", "gau", "Poly", "linear")] == \
        ["linear", "linear", "gaussian", "polynomial", "linear"]


@pytest.mark.parametrize("params,svc,grouped,error,match", [
    ("lambda=[0.1, 1]", True, False, errors.ParameterError, "cross validation needs n_folds of 2 or more"),
    ("epsilon=[0.1, 1]", False, False, errors.ParameterError, "epsilon list several values"),
    ("lambda=[0.1, 1], n_folds=3", True, True, errors.NotSupportedError, "with grouping is not supported"),
    ("stepsize=1", True, False, errors.ParameterError, "stepsize is not a parameter of params"),
    ("max_iter=1.5", True, False, errors.ParameterError, "max_iter must be an integer"),
    ("init_stepsize=0", True, False, errors.ParameterError, "init_stepsize must be greater than 0"),
    ("decay_factor=2", True, False, errors.ParameterError, "decay_factor must be at most 1"),
    ("lambda=[]", True, False, errors.ParameterError, "lambda must list at least one value"),
    ("norm=L3", True, False, errors.ParameterError, "norm must be L1 or L2"),
    ("class_weight=heavy", True, False, errors.ParameterError, "class_weight must be balanced or"),
    ("class_weight={a:1, b:2, c:3}", True, False, errors.ParameterError, "one or two labels"),
    ("class_weight={a:x}", True, False, errors.ParameterError, "the class_weight of a must be a number"),
])
def test_madlib_svm_params_are_checked(params, svc, grouped, error, match):
    with pytest.raises(error, match=match):
        svm_params.params(params, svc, grouped)


def test_kernel_names_and_params_are_checked():
    with pytest.raises(errors.ParameterError, match="invalid kernel function 'rbf'"):
        svm_params.kernel_name("rbf")
    for bad, match in [("n_components=0", "n_components must be at least 1"), ("fit_intercept=maybe", "true or false"),
                       ("gamma=-1", "gamma must be at least 0"), ("sigma=1", "sigma is not a parameter")]:
        with pytest.raises(errors.ParameterError, match=match):
            svm_params.kernel_params("gaussian", bad, 3)


def test_random_features_are_madlibs():
    """The random numbers of MADlib's kernels, Boost.Random 1.74's (figures from a C++ program
    built with the boost headers MADlib is built with): minstd_rand seeded 2, normal(0, 0.5)
    (the sum of 20000 draws: the ziggurat's tail is taken at draw 289), uniform(0, 2 pi) and
    bernoulli(0.5)."""
    normals = svm_kernels.normal_vector(20000, 0.0, 0.5, 2)
    assert normals[:4] == [0.20909633744353712, 0.029771332908591835, 0.12005273582147191, -0.021886791904543818]
    assert normals[288] == 1.8918193373241385  # beyond the ziggurat's base: its tail
    assert math.fsum(normals) == 66.0865289853403
    assert svm_kernels.uniform_vector(3, 0.0, 2 * math.pi, 2) == \
        [0.00028246314884412604, 1.0685492677554664, 1.2736343988167884]
    assert "".join(str(int(b)) for b in svm_kernels.bernoulli_vector(16, 1, 0, 0.5, 2)) == "1110011001111011"
    g = svm_kernels.gaussian(2, 3, 0.5, 1, True)
    assert (g.weights, g.offsets) == (svm_kernels.normal_vector(6, 0, 1.0, 2), svm_kernels.uniform_vector(3, 0, 2 * math.pi, 2))
    assert (g.scale, [r[2] for r in g.random_rows]) == (math.sqrt(2 / 3), ["weights", "offsets"])
    g2 = svm_kernels.gaussian(2, 3, 0.5, 1, True, in_memory=False)  # an engine per feature, seeded 2 and 3
    per_feature = [svm_kernels.normal_vector(3, 0, 1.0, 2), svm_kernels.normal_vector(3, 0, 1.0, 3)]
    assert g2.weights == [per_feature[i][k] for k in range(3) for i in range(2)]
    # MADlib's _random table of 'poly', 'n_components=8, degree=2, coef0=1' on 2 features: its nCr
    # divides by (r + 1)!, so (1 + t)^2's coefficients give sqrt(2), 2, sqrt(8)
    p = svm_kernels.polynomial(2, 8, 2, 1.0, 1, False)
    assert {desp: val for _, val, desp in p.random_rows} == {
        "coefs": [2.8284271247461903, 2, 2, 2], "reps": [2, 1, 1, 1], "other_features": [1.4142135623730951] * 4,
        "weights": [1, 1, 1, -1, -1, 1, 1, -1, -1, 1]}
    assert (p.reps, p.offsets, p.scale) == ([2, 1, 1, 1], [2.8284271247461903, 2, 2, 2] + [1.4142135623730951] * 4,
                                            math.sqrt(1 / 8))


# ------------------------------------------------------------------ arguments
def test_arguments_are_checked_with_their_sqlstates():
    with pytest.raises(errors.ParameterError, match="^dep must not be empty$"):
        args.required(source="t", dep="  ")
    assert args.params_object(None) == {} and args.params_object('{"a": 1}') == {"a": 1}
    with pytest.raises(errors.ParameterError, match=r"^params must be a JSON object, not \[1\]$"):
        args.params_object("[1]")
    assert [args.reader(r) for r in (None, "", "strider", "copy", "pages")] == ["auto", "auto", "pages", "query",
                                                                               "pages"]
    with pytest.raises(errors.ParameterError) as e:
        args.reader("sideways")
    assert str(e.value) == "reader (learnedidx.reader) must be auto, pages or query, not 'sideways'"
    assert args.threads(None) is None and args.threads("4") == 4 and args.threads(2) == 2
    for bad in ("0", 0, True, 2.0, "", "two"):
        with pytest.raises(errors.ParameterError, match=r"threads \(learnedidx.threads\) must be"):
            args.threads(bad)
    with pytest.raises(errors.NotSupportedError, match="supported by linregr, logregr and svm, not lmf"):
        args.unsupported("lmf", {"grouping_cols": "g"})
    args.unsupported("linregr", {"heteroskedasticity_option": True})
    with pytest.raises(errors.NotSupportedError, match="heteroskedasticity_option .* linregr's, not logregr's"):
        args.unsupported("logregr", {"heteroskedasticity_option": True})


@pytest.mark.parametrize("grouping,error,state", [
    ("zip,", errors.SQLSyntaxError, "42601"), ("zip); DROP TABLE houses; --", errors.SQLSyntaxError, "42601"),
    ("zip) FROM t UNION SELECT (1", errors.SQLSyntaxError, "42601"), ("f($$)$$)", errors.SQLSyntaxError, "42601"),
    ("g /* c */", errors.SQLSyntaxError, "42601"), ("'a", errors.SQLSyntaxError, "42601"),
    ("E'\\'' )", errors.SQLSyntaxError, "42601"), ("coef", errors.DuplicateColumnError, "42701"),
    ("zip, Zip", errors.DuplicateColumnError, "42701"), ("nope", errors.UndefinedColumnError, "42703"),
    ("x" * 60 + " + 1", errors.NameTooLongError, "42622"),
])
def test_grouping_columns_name_columns_or_expressions_of_the_source(grouping, error, state):
    Group = args.Group
    assert args.grouping_columns('Zip, "Beds"', "houses", {"zip", "Beds"}, ["coef"]) == [Group("zip"), Group("Beds")]
    assert args.grouping_columns("anything", "(SELECT ...)", None, ["coef"]) == [Group("anything")]  # a query source
    # an expression: one, as written; its output column is named by its text, as MADlib names it
    assert args.grouping_columns(" data->>'bed,room' , zip % 2, f(a, (b)[1]), ba$th || 'x;y' ", "houses",
                                 {"zip"}, ["coef"]) == [
        Group("data->>'bed,room'", "data->>'bed,room'"), Group("zip % 2", "zip % 2"),
        Group("f(a, (b)[1])", "f(a, (b)[1])"), Group("ba$th || 'x;y'", "ba$th || 'x;y'")]
    with pytest.raises(error) as e:
        args.grouping_columns(grouping, "houses", {"zip"}, ["coef"])
    assert e.value.sqlstate == state


# ------------------------------------------------------------------ output tables
def _group(model=None, stats=None, **kw):
    return {"group": None, "model": model, "stats": stats or {}, "num_rows_processed": 8, "rows": 10,
            "loss": 0.5, "num_iterations": 3, "train_seconds": 0.1, "accel_seconds": None, **kw}


LINREGR_STATS = {"r2": 0.9, "std_err": [1.0, 2.0], "t_stats": [3.0, 4.0], "p_values": [0.1, 0.2],
                 "condition_no": 7.0, "variance_covariance": [[1.0, 0.0], [0.0, 1.0]]}


def test_every_column_is_filled_by_name_from_the_reply():
    g = _group({"coef": [1.5, -2.0]}, LINREGR_STATS)
    cols = outputs.model_columns("linregr", [g])
    assert [c for c, _ in cols] == [c for c, _ in catalog.COLUMNS["linregr"]] + ["train_seconds", "accel_seconds"]
    assert outputs.rows([g], cols, "linregr") == [[
        "{1.5,-2.0}", "0.9", "{1.0,2.0}", "{3.0,4.0}", "{0.1,0.2}", "7.0", "8", "2", "{{1.0,0.0},{0.0,1.0}}",
        "0.1", None]]


@pytest.mark.parametrize("missing", sorted(LINREGR_STATS))
def test_a_statistic_the_reply_lacks_is_an_error_not_a_null(missing):
    g = _group({"coef": [1.0]}, {k: v for k, v in LINREGR_STATS.items() if k != missing})
    with pytest.raises(errors.ProtocolError, match=f"no statistic {missing}"):
        outputs.rows([g], outputs.model_columns("linregr", [g]), "linregr")


def test_a_model_array_the_reply_lacks_is_an_error():
    g = _group({"coef": [1.0, 2.0]}, {"loss": 0.1, "norm_of_gradient": 0.2})  # svm without its labels
    with pytest.raises(errors.ProtocolError, match="has no labels for column dep_var_mapping"):
        outputs.rows([g], outputs.model_columns("svm", [g]), "svm")


def test_a_group_that_trained_nothing_has_nulls_and_its_counts():
    g = {"group": 2, "model": None, "stats": {}, "num_rows_processed": 0, "rows": 4}
    cols = outputs.model_columns("logregr", [g])
    values = dict(zip([c for c, _ in cols], outputs.rows([g], cols, "logregr")[0]))
    assert values.pop("num_rows_processed") == "0" and values.pop("num_missing_rows_skipped") == "4"
    assert set(values.values()) == {None}
    assert outputs.failed(g) and outputs.failed(_group({"coef": [float("nan")]}))
    assert not outputs.failed(_group({"coef": [1.0]}))
    # a diverged logregr group (MADlib's TERMINATED): NULL coefficients and statistics, never NaN;
    # its counts, iterations and times
    nan = _group({"coef": [float("nan"), 1.0]}, {"log_likelihood": float("nan"), "std_err": [1.0, 2.0]})
    cols = outputs.model_columns("logregr", [nan])
    values = dict(zip([c for c, _ in cols], outputs.rows([nan], cols, "logregr")[0]))
    assert (values.pop("num_rows_processed"), values.pop("num_missing_rows_skipped"), values.pop("num_iterations"),
            values.pop("train_seconds")) == ("8", "2", "3", "0.1")
    assert set(values.values()) == {None}
    assert outputs.returned([nan], "logregr")[0]["coef"] is None
    assert outputs.returned([nan], "my_sgd")[0]["coef"][0] != outputs.returned([nan], "my_sgd")[0]["coef"][0]


def test_a_user_algorithm_that_maps_labels_gets_madlibs_dep_var_mapping():
    g = _group({"coef": [1.0], "labels": [-1.0, 1.0]}, {})
    cols = outputs.model_columns("my_svm", [g])
    assert ("dep_var_mapping", catalog.F8A) in cols
    assert dict(zip([c for c, _ in cols], outputs.rows([g], cols, "my_svm")[0]))["dep_var_mapping"] == "{-1.0,1.0}"


def test_literals_and_feature_expressions():
    assert outputs.lit(None) is None and outputs.lit(2) == "2" and outputs.lit([[1.0], [2.5]]) == "{{1.0},{2.5}}"
    assert outputs.text_array(['a"b', "c\\d", "e"]) == '{"a\\"b","c\\\\d","e"}'
    assert outputs.feature_expression("features", "array", False) == "(features)::pg_catalog.float8[]"
    assert outputs.feature_expression("x1, f(x2, 3)", "scalars", False) == (
        "(ARRAY[]::pg_catalog.float8[] OPERATOR(pg_catalog.||) (x1) OPERATOR(pg_catalog.||) (f(x2, 3)))"
        "::pg_catalog.float8[]")


def test_summary_columns_are_madlibs_then_ours():
    reply = {"intercept": True, "num_features": 2, "features_form": "scalars", "path": "query", "timings": {}}
    results = [_group({"coef": [1.0]}), _group(None, rows=5, num_rows_processed=0)]
    common = dict(method="logregr", source="t", out="public.m", dep="y", indep="x1, x2", reply=reply,
                  results=results, grouping="g", groups_named=["g"], svm=None)
    logregr = outputs.summary_columns(algorithm="logregr", opts={"max_iter": 5, "grouped": True}, **common)
    named = {c: v for c, _, v in logregr}
    assert [c for c, _, _ in logregr][:8] == ["method", "source_table", "out_table", "dependent_varname",
                                              "independent_varname", "optimizer_params", "num_all_groups",
                                              "num_failed_groups"]
    assert named["optimizer_params"] == "optimizer=irls, max_iter=5, tolerance=0.0001"
    assert (named["num_all_groups"], named["num_failed_groups"]) == (2, 1)
    assert (named["num_rows_processed"], named["num_missing_rows_skipped"]) == (8, 7)
    assert named["params"] == '{"max_iter": 5}' and named["grouping_columns"] == '{"g"}'
    svm = outputs.summary_columns(algorithm="svm", opts={}, **{**common, "method": "svm",
                                  "svm": outputs.svm_summary("0.1", True, {})})
    named = {c: v for c, _, v in svm}
    assert named["method"] == "SVC" and named["version_number"] == "0.1"
    assert named["kernel_params"] == "fit_intercept=true"
    assert named["optim_params"] == "init_stepsize=0.1, max_iter=30, tolerance=0.0"


# ------------------------------------------------------------------ one list, shared with the server
def test_the_server_trains_the_catalogs_builtins_and_groups_what_it_says():
    from learnedidx.indb import runtime
    from learnedidx.indb.runtime.builtins import SOURCES

    assert runtime.ALGORITHMS is catalog.BUILTINS and set(SOURCES) == set(catalog.BUILTINS)
    assert set(catalog.GROUPABLE) < set(catalog.BUILTINS) and set(catalog.COLUMNS) == {*catalog.BUILTINS, None}


# ------------------------------------------------------------------ the SQL wrappers
def _plpython_bodies(script: str) -> dict[str, str]:
    """The body of each plpython3u function of the script, by name."""
    bodies = {}
    for chunk in script.split("CREATE FUNCTION ")[1:]:
        head = chunk.split("$", 1)[0]
        if "plpython3u" in head:
            bodies[head.split("(", 1)[0]] = chunk.split("$py$\n", 1)[1].split("$py$", 1)[0]
    return bodies


def test_every_plpython_function_is_the_prologue_and_one_call():
    script = SCRIPT.read_text()
    bodies = _plpython_bodies(script)
    assert "learnedidx._train_impl" in bodies
    assert script.count("LANGUAGE plpython3u") == len(bodies)
    for name, body in bodies.items():
        assert body.startswith(PROLOGUE), name
        rest = body[len(PROLOGUE):].splitlines()
        assert len(rest) == 2 and rest[0].startswith("from learnedidx.indb.udf import ") and \
            rest[1].startswith("return "), (name, rest)


def test_the_modules_import_nothing_the_servers_python_may_lack(tmp_path):
    """Only the standard library, learnedidx.errors and learnedidx.checks: the installed copy
    imports with no site-packages at all (``python -S``), numpy never loaded."""
    allowed = {"learnedidx.errors", "learnedidx.checks"}
    stdlib = sys.stdlib_module_names
    for path in [ROOT / "errors.py", ROOT / "checks.py", *(ROOT / "indb" / "udf").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
            for n in names:
                assert n.split(".")[0] in stdlib or n in allowed or n.startswith("learnedidx.indb.udf.") or \
                    n.rpartition(".")[0] in allowed, (path, n)
    install._copy_python(tmp_path)
    modules = [f"learnedidx.indb.udf.{p.stem}" for p in (ROOT / "indb" / "udf").glob("*.py") if p.stem != "__init__"]
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); " + "; ".join(f"import {m}" for m in modules) +
            "; assert 'numpy' not in sys.modules; print(sys.modules['learnedidx'].__file__)")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(tmp_path / "learnedidx" / "__init__.py")


@pytest.mark.postgres
@pytest.mark.parametrize("algorithm,cut,message", [
    ("logregr", "std_err", "the server's logregr reply has no statistic std_err for the output table's column"),
    ("linregr", "state", "the server's linregr reply has no valid state for the output table"),
])
def test_a_server_reply_without_a_statistic_fails_the_training_and_leaves_no_table(db, tmp_path, monkeypatch,
                                                                                 algorithm, cut, message):
    """A server whose statistics lack one (an in-process one, its statistics cut): the training
    fails with 08P01 naming it, instead of writing it NULL."""
    from learnedidx.indb.runtime import models
    from learnedidx.server.server import Server, ServerConfig

    statistics = models._statistics
    monkeypatch.setattr(models, "_statistics", lambda *a: {k: v for k, v in statistics(*a).items() if k != cut})
    srv = Server(ServerConfig(socket_path=str(tmp_path / "cut.sock")))
    srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        db.execute("SELECT set_config('learnedidx.socket', %s, false)", (srv.config.socket_path,))
        db.execute("CREATE TABLE cut AS SELECT i::float8 AS y, i % 7 AS x FROM generate_series(1, 50) i")
        with pytest.raises(psycopg.errors.ProtocolViolation) as e:
            db.execute(f"SELECT * FROM learnedidx.{algorithm}_train('cut', 'cut_model', 'y > 20', 'x')")
        assert e.value.diag.message_primary == message
        assert db.execute("SELECT to_regclass('cut_model'), to_regclass('cut_model_summary')").fetchone() == \
            (None, None)
    finally:
        srv.stop()
        t.join(timeout=30)
