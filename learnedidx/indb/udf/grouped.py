"""A grouped training call (MADlib's grouping_cols): the caller's rows streamed to the server,
each numbered by its group (the query's last column), and the groups' values and row counts read
in the same statement, so in one snapshot; both are the caller's SQL, evaluated with its
search_path."""
from __future__ import annotations

import json

from learnedidx.indb.udf.session import Session


def offload(db: Session, request: dict, query: str, groups: list[tuple[str, str]], from_sql: str,
            caller_path: str) -> tuple[str, dict]:
    """The server's raw reply and the groups: {"keys": each group's values (JSON text of
    {name: value}), "rows": its row count}, in the order the server numbered them 1, 2, ...
    (``groups``: each grouping column's name and its SQL over a row of the source ``src``: a
    column, or an expression of the caller's, MADlib's ``data->>'bedroom'``)."""
    k = ", ".join("%s AS c%d" % (sql, i) for i, (_, sql) in enumerate(groups))
    order = ", ".join("k.c%d" % i for i in range(len(groups)))
    obj = ", ".join("%s, k.c%d" % (db.quote_literal(name), i) for i, (name, _) in enumerate(groups))
    stmt = ("SELECT learnedidx._offload('indb.train', $1::pg_catalog.jsonb, NULL, NULL, $2, $3) AS r, "
            "(SELECT pg_catalog.jsonb_build_object('keys', pg_catalog.array_agg(pg_catalog.jsonb_build_object(%s)"
            "::pg_catalog.text ORDER BY %s), 'rows', pg_catalog.array_agg(k.n ORDER BY %s))::pg_catalog.text "
            "FROM (SELECT %s, pg_catalog.count(*) AS n FROM %s AS src GROUP BY %s) AS k) AS keys" % (
                obj, order, order, k, from_sql, ", ".join(str(i + 1) for i in range(len(groups)))))
    row = db.as_caller(caller_path, lambda: db.execute(stmt, ["text", "text", "text"],
                                                       [json.dumps(request), query, caller_path])[0])
    return row["r"], json.loads(row["keys"])
