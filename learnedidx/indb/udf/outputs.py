"""A training call's output tables, from the server's reply: the output table (one row per
model: per group with grouping_cols) and its ``_summary`` table, as MADlib writes them.

Every column of a trained model is filled by name from the reply (the model's arrays, its
statistics, its counts); a name the reply lacks is an error, not a silent NULL: the extension
and the server disagree about an algorithm's output (:class:`~learnedidx.errors.ProtocolError`).
A group that trained no model (all its rows had NULLs), or a logregr group whose training
diverged (coefficients that are not finite: MADlib's TERMINATED), has NULLs, as in MADlib.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from learnedidx.errors import ProtocolError
from learnedidx.indb.udf import catalog
from learnedidx.indb.udf.catalog import F8A, I4, I8, TEXT
from learnedidx.indb.udf.selectlist import split_top

#: Output columns that hold a model's arrays, and the model's name for each.
MODEL_ARRAYS = {"coef": "coef", "u": "u", "v": "v", "row_ids": "row_ids", "col_ids": "col_ids",
                "dep_var_mapping": "labels"}
#: Output columns computed here from the group's row counts.
SKIPPED = ("num_missing_rows_skipped", "num_rows_skipped")
#: The columns a failed group keeps: its counts, iterations and times.
KEPT = ("num_rows_processed", "num_iterations", "train_seconds", "accel_seconds")
#: Algorithms whose diverged models (coefficients not finite) MADlib writes as NULL, its
#: TERMINATED status; the others' reach the table as the values they are (NaN, Infinity).
TERMINATED = ("logregr",)


def lit(v: Any) -> str | None:
    """A value of the reply as the text of a SQL literal; arrays as array literals (converting
    nested lists element by element in PL/Python costs far more than PostgreSQL parsing one
    float8[] literal)."""
    if v is None:
        return None
    if isinstance(v, list):
        return "{" + ",".join(lit(x) if isinstance(x, list) else repr(x) for x in v) + "}"
    return repr(v)


def text_array(items: Iterable[str]) -> str:
    """A text[] literal of ``items``."""
    return "{" + ",".join('"%s"' % g.replace("\\", "\\\\").replace('"', '\\"') for g in items) + "}"


def groups(reply: dict, keys: dict | None) -> list[dict]:
    """The reply's models, one per row of the output table, each with its ``rows`` (read,
    processed or skipped); with grouping (``keys``: the groups' values and row counts, in the
    order the server numbered them 1, 2, ...), a group the server did not train is there too."""
    results = reply["groups"]
    if keys is not None:
        by_group = {g["group"]: g for g in results}
        results = [by_group.get(i + 1) or {"group": i + 1, "model": None, "stats": {}, "num_rows_processed": 0}
                   for i in range(len(keys["keys"]))]
        for g, n in zip(results, keys["rows"]):
            g["rows"] = n
    else:
        results[0]["rows"] = reply["num_rows_processed"] + reply["num_rows_skipped"]
        results[0]["train_seconds"] = reply["train_seconds"]
    return results


def failed(g: dict) -> bool:
    """Whether a group's model failed: none, or coefficients that are not finite."""
    coef = (g["model"] or {}).get("coef")
    return g["model"] is None or (coef is not None and any(x != x or x in (float("inf"), float("-inf")) for x in coef))


def model_columns(algorithm: str, results: list[dict], hetero: bool = False) -> list[tuple[str, str]]:
    """The columns of the output table (a user algorithm that maps labels has MADlib's
    dep_var_mapping too; ``hetero``: linregr's Breusch-Pagan columns)."""
    own = catalog.columns(algorithm, hetero)
    if algorithm not in catalog.BUILTINS and "labels" in (results[0]["model"] or {}):
        own = own + [("dep_var_mapping", F8A)]
    return own + catalog.TIMES


def value(g: dict, name: str, algorithm: str) -> str | None:
    """Column ``name`` of group ``g``'s row, as literal text (None: SQL NULL)."""
    model, stats = g["model"], g["stats"]
    if name in SKIPPED:
        return str(g["rows"] - g["num_rows_processed"])
    if algorithm in TERMINATED and name not in KEPT and model is not None and failed(g):
        return None  # diverged (MADlib's TERMINATED): no coefficients, no statistics, not NaN
    if name in MODEL_ARRAYS:
        if model is not None and MODEL_ARRAYS[name] not in model:
            raise ProtocolError(f"the server's {algorithm} model has no {MODEL_ARRAYS[name]} for column {name}")
        return lit((model or {}).get(MODEL_ARRAYS[name]))
    if name in stats:
        return lit(stats[name])
    if name in g:
        return lit(g[name])
    if model is None:
        return None
    raise ProtocolError(f"the server's {algorithm} reply has no statistic {name} for the output table's column")


def rows(results: list[dict], columns: list[tuple[str, str]], algorithm: str) -> list[list[str | None]]:
    """The output table's rows: one per group, its columns' values as text."""
    return [[value(g, c, algorithm) for c, _ in columns] for g in results]


def returned(results: list[dict], algorithm: str) -> list[dict]:
    """The rows a training function returns (learnedidx.train_result), one per model."""
    gone = [algorithm in TERMINATED and failed(g) for g in results]
    return [{"coef": None if off else (g["model"] or {}).get("coef"),
             "loss": None if off else g["stats"].get("loss", g.get("loss")), "num_rows_processed": g["num_rows_processed"],
             "num_rows_skipped": g["rows"] - g["num_rows_processed"], "num_iterations": g.get("num_iterations"),
             "train_seconds": g.get("train_seconds"), "accel_seconds": g.get("accel_seconds")}
            for g, off in zip(results, gone)]


def feature_expression(indep: str, features_form: str, grouped: bool) -> str:
    """The features as predict takes them: one array, or the items (numbers or arrays)
    concatenated."""
    if features_form == "array" and not grouped:
        return "(%s)::pg_catalog.float8[]" % indep
    return "(ARRAY[]::pg_catalog.float8[] %s)::pg_catalog.float8[]" % " ".join(
        "OPERATOR(pg_catalog.||) (%s)" % item for item in split_top(indep))


def svm_summary(version: str, intercept: bool, opts: dict) -> dict[str, str]:
    """The kernel and parameter columns of svm_train's summary (MADlib's svm functions write
    their own summary: :mod:`learnedidx.indb.udf.svm`)."""
    return {"version_number": version, "kernel_func": "linear",
            "kernel_params": "fit_intercept=%s" % ("true" if intercept else "false"),
            "optim_params": "init_stepsize=%r, max_iter=%r, tolerance=%r" % (
                opts.get("stepsize", 0.1), opts.get("max_iter", 30), opts.get("tolerance", 0.0)),
            "reg_params": "lambda=%r, norm=L2, n_folds=0" % opts.get("lambda", 0.0001)}


def summary_columns(*, algorithm: str, method: str, source: str, out: str, dep: str, indep: str, opts: dict,
                    reply: dict, results: list[dict], grouping: str | None, groups_named: list[str] | None,
                    svm: dict[str, str] | None, groups_sql: list[str] | None = None) -> list[tuple[str, str, Any]]:
    """The summary table's columns (name, type, value): MADlib's for the algorithm, then ours.
    ``svm``: the kernel and parameter columns of an svm model; ``groups_sql``: each group's SQL
    over a row of the source (its column, or its expression), which predict_table evaluates."""
    processed = sum(g["num_rows_processed"] for g in results)
    skipped = sum(g["rows"] for g in results) - processed
    nfailed = sum(1 for g in results if failed(g))
    if algorithm == "svm" and svm is not None:
        head = [("method", TEXT, "SVC"), ("version_number", TEXT, svm["version_number"]),
                ("source_table", TEXT, source), ("model_table", TEXT, out), ("dependent_varname", TEXT, dep),
                ("independent_varname", TEXT, indep), ("kernel_func", TEXT, svm["kernel_func"]),
                ("kernel_params", TEXT, svm["kernel_params"]), ("grouping_col", TEXT, grouping),
                ("optim_params", TEXT, svm["optim_params"]), ("reg_params", TEXT, svm["reg_params"]),
                ("num_all_groups", I4, len(results)), ("num_failed_groups", I4, nfailed),
                ("total_rows_processed", I8, processed), ("total_rows_skipped", I8, skipped)]
    else:
        head = [("method", TEXT, method), ("source_table", TEXT, source), ("out_table", TEXT, out),
                ("dependent_varname", TEXT, dep), ("independent_varname", TEXT, indep)]
        if algorithm == "logregr":
            head += [("optimizer_params", TEXT, "optimizer=%s, max_iter=%s, tolerance=%s" % (
                         opts.get("optimizer", "irls"), opts.get("max_iter", 20), opts.get("tolerance", 0.0001))),
                     ("num_all_groups", I4, len(results)), ("num_failed_groups", I4, nfailed)]
        head += [("num_rows_processed", I8, processed), ("num_missing_rows_skipped", I8, skipped),
                 ("grouping_col", TEXT, grouping)]
    return head + own_columns(opts=opts, reply=reply, groups_named=groups_named, groups_sql=groups_sql,
                              intercept=reply["intercept"],
                              features=feature_expression(indep, reply["features_form"], groups_named is not None))


def own_columns(*, opts: dict, reply: dict, groups_named: list[str] | None, groups_sql: list[str] | None,
                intercept: bool, features: str) -> list[tuple[str, str, Any]]:
    """The summary's columns after MADlib's: learnedidx's (what predict and predict_table read:
    the grouping columns and each group's SQL over a row of the source, whether coef[1] is an
    intercept, the feature expression; and how it trained)."""
    return [("grouping_columns", "pg_catalog.text[]", None if groups_named is None else text_array(groups_named)),
            ("grouping_expressions", "pg_catalog.text[]", None if groups_sql is None else text_array(groups_sql)),
            ("intercept", "pg_catalog.bool", intercept), ("num_features", I4, reply["num_features"]),
            ("feature_expression", TEXT, features),
            ("params", "pg_catalog.jsonb", json.dumps({k: v for k, v in opts.items() if k != "grouped"})),
            ("read_path", TEXT, reply["path"]), ("timings", "pg_catalog.jsonb", json.dumps(reply["timings"]))]
