"""MADlib 2.1's svm functions: ``svm_classification``, ``svm_regression``, ``svm_one_class``
(through ``learnedidx._train``) and ``svm_predict``, with MADlib's arguments, defaults and output
tables: the model (a row per group), its ``_summary``, ``_random`` (the random features of a
gaussian or polynomial kernel) and cross validation's ``validation_result`` table.

The caller's rows stream to the server as MADlib's SVM reads them (the features, a kernel's
random features computed by ``learnedidx._svm_features`` in the query, the labels mapped to
-1/+1 in SQL when they are not numbers or booleans), in the source's order, grouped rows too;
the server trains as MADlib does (:mod:`learnedidx.indb.runtime.svm_igd`).  ``svm_predict``
scores a table with a model in SQL, as the caller: the model's tables must be plain tables
without row-level security for the caller and it evaluates the model's feature expression, so
only members of the model's owner role may use it (docs/indb.md).
"""
from __future__ import annotations

import json
import math
from typing import Any

from learnedidx.errors import DuplicateColumnError, DuplicateTableError, InsufficientPrivilegeError, NameTooLongError, NotAModelError, \
    NotSupportedError, ParameterError, SQLSyntaxError, TrainingDataError, UndefinedColumnError
from learnedidx.indb.udf import args, grouped, outputs, svm_kernels, svm_params
from learnedidx.indb.udf.catalog import F8, F8A, I4, I8, TEXT, TIMES
from learnedidx.indb.udf.madlib_params import keyvalues
from learnedidx.indb.udf.selectlist import array_items, feature_items, ident, split_top
from learnedidx.indb.udf.session import Session, server_result

#: The statements of the svm functions (besides the training driver's).
STATEMENTS = {
    "type_name": ("SELECT pg_catalog.format_type($1, NULL) AS t", ["oid"]),
    "svm_model": ("SELECT pg_catalog.quote_ident(n.nspname) AS nsp, c.relname::pg_catalog.text AS rel, "
                  "c.relkind::pg_catalog.text AS kind, pg_catalog.row_security_active(c.oid) AS rls, "
                  "s.oid AS summary, s.relkind::pg_catalog.text AS skind, s.relowner AS owner, "
                  "pg_catalog.row_security_active(s.oid) AS srls, r.oid AS random, r.relkind::pg_catalog.text AS rkind, "
                  "pg_catalog.row_security_active(r.oid) AS rrls "
                  "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                  "LEFT JOIN pg_catalog.pg_class s ON s.relnamespace = c.relnamespace "
                  "AND s.relname OPERATOR(pg_catalog.=) (c.relname::pg_catalog.text || '_summary') "
                  "LEFT JOIN pg_catalog.pg_class r ON r.relnamespace = c.relnamespace "
                  "AND r.relname OPERATOR(pg_catalog.=) (c.relname::pg_catalog.text || '_random') "
                  "WHERE c.oid = $1", ["oid"]),
    "attr_types": ("SELECT pg_catalog.array_agg(a.attname::pg_catalog.text ORDER BY a.attnum) AS names, "
                   "pg_catalog.array_agg(a.atttypid ORDER BY a.attnum) AS types FROM pg_catalog.pg_attribute a "
                   "WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped", ["oid"]),
    "member": ("SELECT pg_catalog.pg_has_role($1, 'USAGE') AS m", ["oid"]),
    "safe_type": ("SELECT learnedidx._check_group_type($1, $2, $3)", ["text", "text", "oid"]),
}
#: Labels of these types stream as numbers (the server maps the smaller to -1); others are
#: mapped to -1/+1 in the query.  int2, int4, int8, float4, float8, numeric; bool.
NUMERIC_TYPES = {21, 23, 20, 700, 701, 1700}
BOOL, INT4, TEXT_OID, VARCHAR, FLOAT8_ARRAY = 16, 23, 25, 1043, 1022
METHODS = ("classification", "regression", "one_class")


def run(db: Session, source: str | None, out_table: str | None, dep: str | None, indep: str | None,
        spec: Any, caller_path: str) -> list[dict]:
    """One svm call (``spec``: its own arguments, from the SQL function): train, or score
    (``predict``: the model; ``source`` the new data, ``dep`` the id column)."""
    if not isinstance(spec, dict):
        raise ParameterError("madlib_svm must be an object")
    if spec.get("predict") is not None:
        predict(db, spec["predict"], source, dep, out_table, caller_path)
        return []
    if spec.get("method") not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}")
    return train(db, spec, source, out_table, dep, indep, caller_path)


# ------------------------------------------------------------------ names
def _new_table(db: Session, name: str, caller_path: str, suffixes: tuple[str, ...] = ("",)) -> list[str]:
    """The qualified names of table ``name`` + each suffix, none of which may exist yet."""
    target = db.one("target", name, caller_path)
    if len(target["relname"].encode()) > args.MAX_NAME - max(len(s) for s in suffixes):
        raise NameTooLongError(f"table name {name} is too long for its {max(suffixes, key=len)} table")
    out = []
    for s in suffixes:
        t = db.quote_ident(target["schema"]) + "." + db.quote_ident(target["relname"] + s)
        if db.one("exists", t)["e"]:
            raise DuplicateTableError(f"relation {t} already exists")
        out.append(t)
    return out


def _grouping(grouping: str | None, source: str, names: set[str] | None) -> list[str]:
    """The grouping columns (MADlib's grouping_col: columns of the source, comma-separated;
    NULL, '' or 'NULL': none)."""
    if grouping is None or not grouping.strip() or grouping.strip().lower() == "null":
        return []
    out = []
    for item in split_top(grouping):
        name = ident(item)
        if name is None:
            raise SQLSyntaxError(f"grouping_col must name columns of the source, comma-separated, not {item!r}")
        if name in [c for c, _ in _model_columns("text", True)]:
            raise DuplicateColumnError(f"grouping column {name} has the name of an output column")
        if names is not None and name not in names:
            raise UndefinedColumnError(f'column "{name}" of grouping_col does not exist in {source}')
        out.append(name)
    return out


# ------------------------------------------------------------------ kernels in SQL
def _kernel_from(db: Session, random_table: str, kernel: str, kp: dict) -> str:
    """A FROM item ``k`` with the kernel's arrays (w, o, r) read from its ``_random`` table."""
    def part(desp: str) -> str:
        return "(SELECT r.val FROM ONLY %s AS r WHERE r.desp OPERATOR(pg_catalog.=) %s)" % (
            random_table, db.quote_literal(desp))
    empty = "'{}'::pg_catalog.float8[]"
    if kernel == "gaussian":
        w = part("weights") if kp["fit_in_memory"] else (
            "(SELECT pg_catalog.array_agg(r.val[c] ORDER BY c, r.id) FROM ONLY %s AS r, "
            "pg_catalog.generate_series(1, %d) AS c WHERE r.desp OPERATOR(pg_catalog.=) 'weights')" % (
                random_table, kp["n_components"]))
        o, reps = part("offsets"), empty
    else:
        w, reps = part("weights"), part("reps")
        o = "(%s OPERATOR(pg_catalog.||) %s)" % (part("coefs"), part("other_features"))
    # (|| '{}': the arrays detoasted once, not for every row)
    return "(SELECT %s OPERATOR(pg_catalog.||) %s AS w, %s OPERATOR(pg_catalog.||) %s AS o, " \
           "%s OPERATOR(pg_catalog.||) %s AS r) AS k" % (w, empty, o, empty, reps, empty)


def _features(arr: str, kernel: str, kp: dict) -> str:
    """The SQL of a row's features as the model takes them."""
    if kernel == "linear":
        return "(%s OPERATOR(pg_catalog.||) ARRAY[1]::pg_catalog.float8[])" % arr if kp["fit_intercept"] else arr
    scale = math.sqrt((2.0 if kernel == "gaussian" else 1.0) / kp["n_components"])
    return "learnedidx._svm_features(%s, '%s', k.w, k.o, k.r, %r::pg_catalog.float8, %s)" % (
        arr, kernel, scale, "true" if kp["fit_intercept"] else "false")


def _no_nulls(arr: str) -> str:
    return "(%s IS NOT NULL AND pg_catalog.array_position(%s, NULL) IS NULL)" % (arr, arr)


# ------------------------------------------------------------------ training
def train(db: Session, spec: dict, source: str | None, model_table: str | None, dep: str | None,
          indep: str | None, caller_path: str) -> list[dict]:
    method = spec["method"]
    svc, one_class = method != "regression", method == "one_class"
    args.required(source_table=source, model_table=model_table, independent_varname=indep,
                  **({} if one_class else {"dependent_varname": dep}))
    kernel = svm_params.kernel_name(spec.get("kernel_func") or ("gaussian" if one_class else None))
    src = db.one("source", source, caller_path)
    names = None if src["oid"] is None else set(db.one("columns", src["oid"])["c"] or [])
    groups = _grouping(spec.get("grouping_col"), source, names)
    if one_class and groups:
        raise NotSupportedError("svm_one_class trains one model: grouping_col is not supported (nor by MADlib)")
    p = svm_params.params(spec.get("params"), svc, bool(groups))
    reader = args.reader(db.one("setting", "learnedidx.reader")["v"])
    threads = args.threads(db.one("setting", "learnedidx.threads")["v"] or None)
    out, summary, random_table = _new_table(db, model_table, caller_path, ("", "_summary", "_random"))
    validation = _new_table(db, p["validation_result"], caller_path)[0] if p["validation_result"] else None
    from_sql = src["from_sql"]
    arr = outputs.feature_expression(indep, "scalars", True)

    def caller(sql: str) -> Any:
        return db.as_caller(caller_path, lambda: db.execute(sql))

    # The kernel: its parameters (defaults from the first row's features) and random features.
    n_features = None
    if kernel != "linear":
        first = caller("SELECT pg_catalog.cardinality(%s) AS n FROM %s AS src LIMIT 1" % (arr, from_sql))
        n_features = first[0]["n"] if len(first) else None
        if not n_features:
            raise TrainingDataError("no rows to train on: the kernel's dimensions follow the first row's features")
    kp = svm_params.kernel_params(kernel, spec.get("kernel_params"), n_features or 1)
    if one_class:
        kp["fit_intercept"] = True  # MADlib's one-class svm separates the rows from the origin
    mapping = None
    if kernel == "gaussian":
        mapping = svm_kernels.gaussian(n_features, kp["n_components"], kp["gamma"], kp["random_state"],
                                       kp["fit_intercept"], kp["fit_in_memory"])
    elif kernel == "polynomial":
        mapping = svm_kernels.polynomial(n_features, kp["n_components"], kp["degree"], kp["coef0"],
                                         kp["random_state"], kp["fit_intercept"])
    if mapping is not None:
        db.execute("CREATE TABLE %s (id pg_catalog.int4, val pg_catalog.float8[], desp pg_catalog.text)" % random_table)
        insert = db.plpy.prepare("INSERT INTO %s VALUES ($1, $2, $3)" % random_table, ["int4", "float8[]", "text"])
        for row in mapping.random_rows:
            db.plpy.execute(insert, list(row))
    feats = _features(arr, kernel, kp)
    streamed = arr if kernel == "linear" else feats  # (the server adds the linear kernel's intercept)
    transformed = kernel != "linear" or kp["fit_intercept"]  # MADlib's source without rows of NULL features

    # The labels: their type, and (when the query maps them, or class weights name them) their values.
    dep_type = "pg_catalog.float8"
    labels: list[str] | None = None
    if one_class:
        dep_sql = "1.0::pg_catalog.float8"
    else:
        oid = caller("SELECT (%s) FROM %s AS src LIMIT 0" % (dep, from_sql)).coltypes()[0]
        dep_type = db.one("type_name", oid)["t"]
        dep_sql = "(%s)" % dep
        if svc and (oid not in NUMERIC_TYPES | {BOOL} or p["class_weight"] is not None):
            labels = caller("SELECT pg_catalog.array_agg(s.y::pg_catalog.text ORDER BY s.y) AS l FROM "
                            "(SELECT DISTINCT (%s) AS y FROM %s AS src WHERE (%s) IS NOT NULL) AS s" % (
                                dep, from_sql, dep))[0]["l"] or []
            if len(labels) != 2:
                raise TrainingDataError(f"svm classification needs exactly two label values, not {len(labels)}")
            if oid not in NUMERIC_TYPES | {BOOL}:  # (compared as text, as the labels were read)
                dep_sql = ("(CASE WHEN (%s)::pg_catalog.text OPERATOR(pg_catalog.=) %s THEN -1.0 WHEN (%s)::pg_catalog.text "
                           "OPERATOR(pg_catalog.=) %s THEN 1.0 END)::pg_catalog.float8" % (
                               dep, db.quote_literal(labels[0]), dep, db.quote_literal(labels[1])))
    weights, fold_weights = _class_weights(db, p["class_weight"], svc, one_class, labels, dep, from_sql,
                                           _no_nulls(arr) if transformed else "true", caller)

    # What to stream: the page path reads plain columns of a table (linear kernel, one model).
    listed = array_items(indep)
    lead_one = listed is not None and bool(listed) and listed[0].strip() == "1"
    items, _ = feature_items(indep)
    columns = None
    if names is not None and kernel == "linear" and not groups and not one_class and dep_sql == "(%s)" % dep:
        found = [ident(c) for c in [dep] + items]
        if items and all(f in names for f in found):
            columns = found
    if reader == "pages" and columns is None:
        raise NotSupportedError("the page reader reads plain columns of a table with the linear kernel, one model "
                                "and labels that are numbers")
    pages = reader != "query" and columns is not None
    eps_sql = _epsilon(db, p, groups, svc, caller_path, from_sql)
    kfrom = "" if mapping is None else ", " + _kernel_from(db, random_table, kernel, kp)
    if groups:
        g = ", ".join("src.%s AS g%d" % (db.quote_ident(c), i) for i, c in enumerate(groups))
        order = ", ".join("q.g%d" % i for i in range(len(groups)))
        # numbered as the keys below are ordered; streamed in the source's order (row_number)
        query = ("SELECT q.d, q.f%s, (pg_catalog.dense_rank() OVER (ORDER BY %s))::pg_catalog.float8 FROM "
                 "(SELECT %s AS d, %s AS f%s, %s, pg_catalog.row_number() OVER () AS rn FROM %s AS src%s) AS q "
                 "ORDER BY q.rn" % (", q.e" if eps_sql else "", order, dep_sql, streamed,
                                    ", %s AS e" % eps_sql if eps_sql else "", g, from_sql, kfrom))
    else:
        query = "SELECT %s, %s FROM %s AS src%s" % (dep_sql, streamed, from_sql, kfrom)
    igd = {**{k: p[k] for k in svm_params.LISTS}, "tolerance": p["tolerance"], "norm": p["norm"],
           "n_folds": p["n_folds"], "svc": svc, "one_class": one_class,
           "intercept": kernel == "linear" and kp["fit_intercept"],
           "lead_one": pages and lead_one, "eps_column": bool(eps_sql), "class_weight": weights,
           "fold_class_weight": fold_weights}
    request = {"algorithm": "svm", "params": {"igd": igd, "grouped": bool(groups),
                                              **({"threads": threads} if threads else {})},
               "dep": dep, "indep": indep}
    if groups:
        _model_table(db, out, groups, dep_type, svc, caller_path, from_sql)
        raw, keys = grouped.offload(db, request, query, [(g, "src.%s" % db.quote_ident(g)) for g in groups],
                                    from_sql, caller_path)
    else:
        raw = db.one("offload", json.dumps(request), src["oid"] if pages else None, columns if pages else None,
                     None if reader == "pages" else query, caller_path)["r"]
        keys = None
    reply = server_result(raw)
    results = outputs.groups(reply, keys)
    if not groups:
        _model_table(db, out, [], dep_type, svc, caller_path, from_sql)
    _write_models(db, out, results, keys, groups, dep_type, svc, labels)

    chosen = {**p, **reply["chosen"]}
    if validation is not None and reply.get("cv"):
        cv = reply["cv"]
        db.execute("CREATE TABLE %s (%s) AS VALUES %s" % (
            validation, ", ".join(db.quote_ident(c) for c in cv["columns"]),
            ", ".join("(%s)" % ", ".join(map(_number, row)) for row in cv["rows"])))
    cw_text = spec_text(spec.get("params"), "class_weight") or ("balanced" if one_class else "")
    processed = sum(g["num_rows_processed"] for g in results)
    head = [("method", TEXT, "SVC" if svc else "SVR"), ("version_number", TEXT, db.one("version")["extversion"]),
            ("source_table", TEXT, source), ("model_table", TEXT, model_table), ("dependent_varname", TEXT, dep),
            ("independent_varname", TEXT, indep), ("kernel_func", TEXT, kernel),
            ("kernel_params", TEXT, svm_params.kernel_params_text(kernel, kp)),
            ("grouping_col", TEXT, ",".join(groups) if groups else None),
            ("optim_params", TEXT, svm_params.optim_text(chosen, cw_text)),
            ("reg_params", TEXT, svm_params.reg_text(chosen)),
            ("num_all_groups", I4, len(results)), ("num_failed_groups", I4, sum(map(outputs.failed, results))),
            ("total_rows_processed", I8, processed),
            ("total_rows_skipped", I8, sum(g["rows"] for g in results) - processed)]
    own = outputs.own_columns(opts={"madlib_svm": spec, "reader": reader}, reply=reply, groups_named=groups or None,
                              groups_sql=[db.quote_ident(g) for g in groups] or None, intercept=False,
                              features=feats if kernel == "linear" else arr)
    cols = head + own
    db.execute("CREATE TABLE %s (%s, created pg_catalog.timestamptz DEFAULT pg_catalog.now())" % (
        summary, ", ".join("%s %s" % c[:2] for c in cols)))
    db.execute("INSERT INTO %s VALUES (%s)" % (summary, ", ".join("$%d::%s" % (i + 1, c[1]) for i, c in enumerate(cols))),
               ["text"] * len(cols), [None if c[2] is None else str(c[2]) for c in cols])
    return outputs.returned(results, "svm")


def _number(v: float | int) -> str:
    """A number as MADlib's validation table writes it (a numeric literal; NaN and infinities
    quoted)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "'%s'::pg_catalog.numeric" % ("NaN" if v != v else "Infinity" if v > 0 else "-Infinity")
    return str(v)


def spec_text(params: str | None, name: str) -> str:
    """The text a params string gives ``name`` ('' when it does not name it)."""
    return keyvalues(params, "params").get(name, "")


def _class_weights(db: Session, cw, svc: bool, one_class: bool, labels: list[str] | None, dep: str | None,
                   from_sql: str, rows_filter: str, caller) -> tuple[Any, Any]:
    """The class weights of the model's training and of cross validation's folds: {"-1": w,
    "1": w}, "balanced" (the server counts) or None.  ``balanced`` is half the rows over the
    class's rows, counted as MADlib counts them (every row of the source, NULL labels too)."""
    if not svc or cw is None:
        return (("balanced", "balanced") if one_class else (None, None))
    if one_class:
        if cw == "balanced":
            return "balanced", "balanced"
        levels = ["-1", "1"]
    else:
        levels = labels
    if cw == "balanced":
        counts = caller("SELECT (%s)::pg_catalog.text AS k, pg_catalog.count(*) AS v FROM %s AS src WHERE %s "
                        "GROUP BY (%s)" % (dep, from_sql, rows_filter, dep))
        n = sum(int(r["v"]) for r in counts)
        by_label = {r["k"]: n / 2 / int(r["v"]) for r in counts if r["k"] is not None}
        return {"-1": by_label.get(levels[0], 1.0), "1": by_label.get(levels[1], 1.0)}, "balanced"
    weights = {"-1": 1.0, "1": 1.0}
    for key, value in cw:
        if key not in levels:
            raise ParameterError(f"class_weight names {key!r}, which is not a label: the labels are "
                                 f"{', '.join(levels)}")
        weights["-1" if key == levels[0] else "1"] = value
    return weights, weights


def _epsilon(db: Session, p: dict, groups: list[str], svc: bool, caller_path: str, from_sql: str) -> str | None:
    """The SQL of a row's epsilon from ``eps_table`` (regression with grouping), else None."""
    if svc or not groups or not p["eps_table"]:
        return None
    eps = db.one("source", p["eps_table"], caller_path)
    match = " AND ".join("e.%s OPERATOR(pg_catalog.=) src.%s" % (db.quote_ident(g), db.quote_ident(g)) for g in groups)
    return "COALESCE((SELECT e.epsilon FROM %s AS e WHERE %s LIMIT 1), %r::pg_catalog.float8)" % (
        eps["from_sql"], match, p["epsilon"][0])


def _model_columns(dep_type: str, svc: bool) -> list[tuple[str, str]]:
    return [("coef", F8A), ("loss", F8), ("norm_of_gradient", F8), ("num_iterations", I4),
            ("num_rows_processed", I8), ("num_rows_skipped", I8), ("dep_var_mapping", dep_type + "[]")] + TIMES


def _model_table(db: Session, out: str, groups: list[str], dep_type: str, svc: bool, caller_path: str,
                 from_sql: str) -> None:
    """The model table: the grouping columns (the source's types; predict reads only types it
    can read with the system's code), then MADlib's columns, then ours."""
    cols = ", ".join("NULL::%s AS %s" % (t, c) for c, t in _model_columns(dep_type, svc))
    if not groups:
        db.execute("CREATE TABLE %s AS SELECT %s WITH NO DATA" % (out, cols))
        return
    db.as_caller(caller_path, lambda: db.execute("CREATE TABLE %s AS SELECT %s, %s FROM %s AS src WITH NO DATA" % (
        out, ", ".join("src.%s" % db.quote_ident(g) for g in groups), cols, from_sql)))
    db.run("group_types", out, len(groups))


def _mapping_literal(dep_type: str, svc: bool, labels: list[str] | None, model: dict | None) -> str | None:
    """dep_var_mapping as a text[] literal of the label type's values (regression: {NULL})."""
    if not svc:
        return "{NULL}"
    if labels is None:
        if model is None:
            return None
        values = model["labels"]
        if dep_type == "boolean":
            labels = ["true" if v else "false" for v in values]
        elif dep_type in ("bigint", "integer", "smallint"):
            labels = [str(int(v)) for v in values]
        else:
            labels = [repr(float(v)) for v in values]
    return outputs.text_array(labels)


def _write_models(db: Session, out: str, results: list[dict], keys: dict | None, groups: list[str], dep_type: str,
                  svc: bool, labels: list[str] | None) -> None:
    """The model table's rows (one per group): the server's models, dep_var_mapping of the
    labels' type."""
    cols = _model_columns(dep_type, svc)
    at = [c for c, _ in cols].index("dep_var_mapping")
    values = outputs.rows(results, cols[:at] + cols[at + 1:], "svm")
    first = 1 if groups else 0  # $1: the group's values (JSON)
    casts = ", ".join("$%d::%s" % (first + i + 1, "pg_catalog.text[]::" + t if i == at else t)
                      for i, (_, t) in enumerate(cols))
    if not groups:
        insert = db.plpy.prepare("INSERT INTO %s VALUES (%s)" % (out, casts), ["text"] * len(cols))
    else:
        insert = db.plpy.prepare("INSERT INTO %s SELECT %s, %s FROM pg_catalog.jsonb_populate_record(NULL::%s, "
                                 "$1::pg_catalog.jsonb) AS k" % (
                                     out, ", ".join("k.%s" % db.quote_ident(g) for g in groups), casts, out),
                                 ["text"] * (len(cols) + 1))
    for i, (g, row) in enumerate(zip(results, values)):
        row = row[:at] + [_mapping_literal(dep_type, svc, labels, g["model"])] + row[at:]
        db.plpy.execute(insert, row if not groups else [keys["keys"][i]] + row)


# ------------------------------------------------------------------ svm_predict
def predict(db: Session, model: Any, new_data: str | None, id_col: str | None, output_table: str | None,
            caller_path: str) -> None:
    """MADlib's svm_predict: ``output_table`` (id, prediction, decision_function; with grouping,
    grouping_col (the group's values as text[]) and the grouping columns) scoring the rows of
    ``new_data`` whose features have no NULL."""
    args.required(model_table=model, new_data_table=new_data, id_col_name=id_col, output_table=output_table)
    if not isinstance(model, str):
        raise ParameterError("model_table must be a table's name")
    m = db.one("source", model, caller_path)
    if m["oid"] is None:
        raise NotAModelError("model_table must name a model's table, not a query")
    info = db.one("svm_model", m["oid"])
    if info["kind"] != "r" or info["skind"] != "r" or (info["random"] is not None and info["rkind"] != "r"):
        raise NotAModelError(f"{model} is not an svm model: a plain table with a plain _summary table beside it")
    if info["rls"] or info["srls"] or (info["random"] is not None and info["rrls"]):
        raise InsufficientPrivilegeError(f"row-level security applies to model {model}'s tables: svm_predict does "
                                         "not read a model through its owner's policies")
    if not db.one("member", info["owner"])["m"]:
        err = InsufficientPrivilegeError(f"svm_predict evaluates the feature expression of model {model}, "
                                         "SQL its owner wrote")
        err.hint = "Score the rows yourself: learnedidx.linregr_predict(coef, features) is coef . features."
        raise err
    qualified = "%s.%s" % (info["nsp"], db.quote_ident(info["rel"]))
    summary_name = "%s.%s" % (info["nsp"], db.quote_ident(info["rel"] + "_summary"))
    want = {"method", "dependent_varname", "independent_varname", "kernel_func", "kernel_params", "grouping_col"}
    _require_types(db, info["summary"], summary_name, {c: (TEXT_OID, VARCHAR) for c in want})
    model_cols = _require_types(db, m["oid"], qualified, {"coef": (FLOAT8_ARRAY,)})
    s = db.execute("SELECT %s FROM ONLY %s AS s" % (", ".join("s.%s::pg_catalog.text" % c for c in sorted(want)),
                                                    summary_name))
    if len(s) != 1:
        raise NotAModelError(f"{model} is not an svm model: its summary has {len(s)} rows")
    s = s[0]
    method = (s["method"] or "").upper()
    if method not in ("SVC", "SVR"):
        raise NotAModelError(f"{model} is not an svm model: its summary's method is {s['method']!r}, not SVC or SVR")
    kernel = svm_params.kernel_name(s["kernel_func"])
    kp = svm_params.kernel_params(kernel, s["kernel_params"], 1)
    groups = _grouping(s["grouping_col"], model, None)
    for g in groups:
        if g not in model_cols:
            raise UndefinedColumnError(f'model {model} has no grouping column "{g}"')
        db.run("safe_type", qualified, g, model_cols[g])
    if method == "SVC":
        if "dep_var_mapping" not in model_cols:
            raise UndefinedColumnError(f"model {model} has no dep_var_mapping")
        db.run("safe_type", qualified, "dep_var_mapping", model_cols["dep_var_mapping"])
    random_table = "%s.%s" % (info["nsp"], db.quote_ident(info["rel"] + "_random"))
    if kernel != "linear":
        if info["random"] is None:
            raise NotAModelError(f"model {model} of a {kernel} kernel has no _random table")
        _require_types(db, info["random"], random_table, {"id": (INT4,), "val": (FLOAT8_ARRAY,), "desp": (TEXT_OID,)})
    idname = ident(id_col)
    if idname is None:
        raise ParameterError(f"id_col_name must name a column of the new data, not {id_col!r}")
    out = _new_table(db, output_table, caller_path)[0]
    src = db.one("source", new_data, caller_path)
    arr = outputs.feature_expression(s["independent_varname"], "scalars", True)
    feats = _features(arr, kernel, kp)
    kfrom = "" if kernel == "linear" else ", " + _kernel_from(db, random_table, kernel, kp)
    pred = "p.d" if method == "SVR" else \
        "CASE WHEN p.d OPERATOR(pg_catalog.>=) 0 THEN m.dep_var_mapping[2] ELSE m.dep_var_mapping[1] END"
    qid = db.quote_ident(idname)
    if groups:
        gq = [db.quote_ident(g) for g in groups]
        sql = ("CREATE TABLE %s AS SELECT src.%s AS %s, %s AS prediction, p.d AS decision_function, "
               "ARRAY[%s] AS grouping_col, %s FROM ONLY %s AS m JOIN %s AS src ON %s%s, "
               "LATERAL (SELECT learnedidx.linregr_predict(m.coef, %s) AS d OFFSET 0) AS p WHERE %s "
               "ORDER BY 4, 1" % (
                   out, qid, qid, pred, ", ".join("src.%s::pg_catalog.text" % g for g in gq),
                   ", ".join("src.%s" % g for g in gq), qualified, src["from_sql"],
                   " AND ".join("m.%s OPERATOR(pg_catalog.=) src.%s" % (g, g) for g in gq), kfrom, feats,
                   _no_nulls(arr)))
    else:
        sql = ("CREATE TABLE %s AS SELECT src.%s AS %s, %s AS prediction, p.d AS decision_function "
               "FROM ONLY %s AS m, %s AS src%s, LATERAL (SELECT learnedidx.linregr_predict(m.coef, %s) AS d "
               "OFFSET 0) AS p WHERE %s" % (out, qid, qid, pred, qualified, src["from_sql"], kfrom, feats,
                                           _no_nulls(arr)))
    db.as_caller(caller_path, lambda: db.execute(sql))


def _require_types(db: Session, relid: int, name: str, want: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The columns of ``relid`` and their types, each of ``want`` present with one of its types
    (a model's columns are read without casts, which could run code of the owner's)."""
    row = db.one("attr_types", relid)
    cols = dict(zip(row["names"] or [], row["types"] or []))
    for c, types in want.items():
        if cols.get(c) not in types:
            raise NotAModelError(f"{name} is not an svm model's table: it has no column {c} of the type svm "
                                 f"writes" if c not in cols else f"column {c} of {name} has another type than svm writes")
    return cols
