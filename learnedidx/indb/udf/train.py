"""The training driver, ``learnedidx._train_impl``: trains a built-in or registered algorithm
on the caller's source, streaming the caller's rows to the server (``learnedidx._offload``),
and writes the model: the output table and its _summary table as MADlib writes them, created
in the caller's transaction in the schema ``out_table`` resolves to (CREATE on it is
PostgreSQL's check), so a failed or cancelled training leaves neither."""
from __future__ import annotations

import json
from typing import Any

from learnedidx.errors import DuplicateTableError, NameTooLongError, NotSupportedError
from learnedidx.indb.udf import args, catalog, grouped, outputs, regress, shards, svm
from learnedidx.indb.udf.selectlist import feature_items, ident
from learnedidx.indb.udf.session import Session, server_result, sql_function

#: The statements of a training call, prepared once per session.
STATEMENTS = {
    "setting": ("SELECT pg_catalog.current_setting($1, true) AS v", ["text"]),
    "source": ("SELECT rel::pg_catalog.oid AS oid, from_sql FROM learnedidx._source($1, $2)", ["text", "text"]),
    "target": ("SELECT schema, relname FROM learnedidx._target($1, $2)", ["text", "text"]),
    "exists": ("SELECT pg_catalog.to_regclass($1) IS NOT NULL AS e", ["text"]),
    "columns": ("SELECT pg_catalog.array_agg(attname::pg_catalog.text) AS c FROM pg_catalog.pg_attribute "
                "WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped", ["oid"]),
    "algorithm": ("SELECT qualified, source FROM learnedidx._algorithm($1, $2)", ["text", "text"]),
    "offload": ("SELECT learnedidx._offload('indb.train', $1::pg_catalog.jsonb, "
                "$2::pg_catalog.oid::pg_catalog.regclass, $3, $4, $5) AS r", ["text", "oid", "text[]", "text", "text"]),
    "group_types": ("SELECT learnedidx._check_group_type($1, a.attname::pg_catalog.text, a.atttypid) "
                    "FROM pg_catalog.pg_attribute a WHERE a.attrelid = $1::pg_catalog.regclass "
                    "AND a.attnum BETWEEN 1 AND $2 ORDER BY a.attnum", ["text", "int4"]),
    "version": ("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'learnedidx'", []),
}


@sql_function
def train(plpy: Any, SD: dict, algorithm: str, source: str | None, out_table: str | None, dep: str | None,
          indep: str | None, params: str | None, caller_path: str) -> list[dict]:
    """Train and write the model; returns one row (learnedidx.train_result) per model."""
    db = Session(plpy, SD, {**STATEMENTS, **svm.STATEMENTS, **regress.STATEMENTS, **shards.STATEMENTS})
    opts = args.params_object(params)
    if algorithm == "svm" and "madlib_svm" in opts:  # MADlib's svm functions, svm_predict too (svm.py)
        return svm.run(db, source, out_table, dep, indep, opts["madlib_svm"], caller_path)
    args.required(source=source, out_table=out_table, dep=dep, indep=indep)
    args.unsupported(algorithm, opts)
    hetero = bool(opts.get("heteroskedasticity_option"))
    grouping = opts.pop("grouping_cols", None)
    reader = args.reader(opts.pop("reader", None) or db.one("setting", "learnedidx.reader")["v"])
    threads = opts.get("threads")
    if threads is None:
        threads = db.one("setting", "learnedidx.threads")["v"] or None
    threads = args.threads(threads)
    if threads is not None:
        opts["threads"] = threads

    request = {"algorithm": algorithm, "params": opts, "dep": dep, "indep": indep}
    method = algorithm
    if algorithm not in catalog.BUILTINS:
        alg = db.one("algorithm", algorithm, caller_path)
        method, request["dsl_source"] = alg["qualified"], alg["source"]
    columns_out = catalog.columns(algorithm, hetero)

    target = db.one("target", out_table, caller_path)
    if len(target["relname"].encode()) > args.MAX_NAME - len("_summary"):
        raise NameTooLongError(f"output table name {out_table} is too long for its _summary table")
    out = db.quote_ident(target["schema"]) + "." + db.quote_ident(target["relname"])
    summary = db.quote_ident(target["schema"]) + "." + db.quote_ident(target["relname"] + "_summary")
    for t in (out, summary):
        if db.one("exists", t)["e"]:
            raise DuplicateTableError(f"relation {t} already exists")

    # What to read: dep and indep are columns or SQL expressions of the source.
    src = db.one("source", source, caller_path)
    items, intercept = feature_items(indep)
    if intercept is not None:
        opts["intercept"] = intercept
    query = "SELECT (%s), %s FROM %s AS src" % (dep, indep, src["from_sql"])
    names = None if src["oid"] is None else set(db.one("columns", src["oid"])["c"] or [])
    columns = None
    if names is not None:
        found = [ident(c) for c in [dep] + items]
        if items and all(f in names for f in found):
            columns = found

    groups = group_sql = None
    if grouping is not None:
        groups = args.grouping_columns(grouping, source, names, [c for c, _ in columns_out + catalog.TIMES])
        if reader == "pages":
            raise NotSupportedError("the page reader trains one model: grouping_cols reads the query path")
        # each group's SQL over a row of the source: its column, or its expression (the caller's
        # own); the summary keeps it for predict_table
        group_sql = [db.quote_ident(g.name) if g.expression is None else "(%s)" % g.expression for g in groups]
        opts["grouped"] = True
        query = "SELECT (%s), %s, (pg_catalog.dense_rank() OVER (ORDER BY %s))::pg_catalog.float8 FROM %s AS src" % (
            dep, indep, ", ".join(group_sql), src["from_sql"])
        # The output table first, the grouping columns with the source's types as in MADlib's:
        # predict reads only types it can read with the system's code, so others are refused
        # before training.
        db.as_caller(caller_path, lambda: db.execute("CREATE TABLE %s AS SELECT %s, %s FROM %s AS src WITH NO DATA" % (
            out, ", ".join("%s AS %s" % (e, db.quote_ident(g.name)) for e, g in zip(group_sql, groups)),
            ", ".join("NULL::%s AS %s" % (t, c) for c, t in columns_out + catalog.TIMES), src["from_sql"])))
        db.run("group_types", out, len(groups))
    if reader == "pages" and columns is None:
        raise NotSupportedError("the page reader reads plain columns of a table, view-free: %s" % (
            "the source is a query" if src["oid"] is None else "dep or indep is an expression"))

    pages = reader != "query" and columns is not None and groups is None
    # a partitioned table with postgres_fdw partitions: each shard trains on its own rows
    sharded = shards.plan(db, src["oid"], request, opts, hetero, reader, columns, groups, caller_path)
    if sharded is not None:
        reply, keys = shards.train(db, sharded, request, opts, out, None if groups is None else
                                   [g.name for g in groups], caller_path)
    else:
        if groups is None:
            raw = db.one("offload", json.dumps(request), src["oid"] if pages else None, columns if pages else None,
                         query if reader != "pages" else None, caller_path)["r"]
            keys = None
        else:
            raw, keys = grouped.offload(db, request, query, [(g.name, e) for g, e in zip(groups, group_sql)],
                                        src["from_sql"], caller_path)
        reply = server_result(raw)

    # The output table: one row per model (per group with grouping).
    results = outputs.groups(reply, keys)
    if algorithm == "linregr":
        regress.linregr_statistics(db, results, hetero)
    model_cols = outputs.model_columns(algorithm, results, hetero)
    types = [t for _, t in model_cols]
    if groups is None:
        db.execute("CREATE TABLE %s (%s)" % (out, ", ".join("%s %s" % c for c in model_cols)))
        insert = plpy.prepare("INSERT INTO %s VALUES (%s)" % (
            out, ", ".join("$%d::%s" % (i + 1, t) for i, t in enumerate(types))), ["text"] * len(types))
    else:  # the output table was made before training
        insert = plpy.prepare("INSERT INTO %s SELECT %s, %s FROM pg_catalog.jsonb_populate_record(NULL::%s, "
                              "$1::pg_catalog.jsonb) AS k" % (
            out, ", ".join("k.%s" % db.quote_ident(g.name) for g in groups),
            ", ".join("$%d::%s" % (i + 2, t) for i, t in enumerate(types)), out), ["text"] * (len(types) + 1))
    for i, row_values in enumerate(outputs.rows(results, model_cols, algorithm)):
        plpy.execute(insert, row_values if groups is None else [keys["keys"][i]] + row_values)

    # The summary table: MADlib's columns for the algorithm, then ours.
    svm_summary = outputs.svm_summary(db.one("version")["extversion"], reply["intercept"], opts) \
        if algorithm == "svm" else None
    cols = outputs.summary_columns(algorithm=algorithm, method=method, source=source, out=out, dep=dep, indep=indep,
                                   opts=opts, reply=reply, results=results,
                                   grouping=grouping if groups is not None else None,
                                   groups_named=None if groups is None else [g.name for g in groups],
                                   groups_sql=group_sql,
                                   svm=svm_summary)
    db.execute("CREATE TABLE %s (%s, created pg_catalog.timestamptz DEFAULT pg_catalog.now())" % (
        summary, ", ".join("%s %s" % c[:2] for c in cols)))
    db.execute("INSERT INTO %s VALUES (%s)" % (summary, ", ".join("$%d::%s" % (i + 1, c[1]) for i, c in enumerate(cols))),
               ["text"] * len(cols), [None if c[2] is None else str(c[2]) for c in cols])
    return outputs.returned(results, algorithm)
