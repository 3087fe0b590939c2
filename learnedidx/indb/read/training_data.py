"""Training data read under the caller's snapshot and role: by the Strider where it can read
the table, else by binary COPY of a query.

On the COPY path every column is cast to ``float8`` (scalars) or ``float8[]`` (one array column of
features) in the query, so one Numba decoder serves all numeric types; PostgreSQL applies
privileges and row-level security to the query because the session runs as the caller.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from learnedidx.errors import InDBError, StriderFallback
from learnedidx.indb.read import copybinary, strider
from learnedidx.indb.read.access import ARRAY_TYPES, RelationInfo

#: Read paths a caller may ask for with the ``reader`` training parameter.
READ_PATHS = ("auto", "strider", "copy")


@dataclass
class TrainingData:
    X: np.ndarray  # float64 (rows, d): usable rows only
    y: np.ndarray | None  # float64 (rows,)
    rows_total: int
    rows_skipped: int  # rows with a NULL (or NaN-free but NULL array element)
    path: str
    seconds: float


def read_training_data(conn: psycopg.Connection, rel: RelationInfo, dep: str | None, indep: list[str], *,
                       path: str = "auto", page_conninfo: str | None = None, connections: int = 2) -> TrainingData:
    """Labels ``dep`` and features ``indep`` (one array column, or several scalar columns).

    ``path`` chooses the reader: ``"strider"`` (heap pages, see :mod:`.strider`),
    ``"copy"`` (binary COPY of a query) or ``"auto"`` (the Strider where it can decode the
    table, else COPY).  ``page_conninfo`` reaches the database as the server's own role for
    page reads over ``connections`` connections.
    """
    if path not in READ_PATHS:
        raise InDBError(f"reader must be one of {', '.join(READ_PATHS)}, not {path!r}")
    if path != "copy":
        why = strider.ineligible_reason(conn, rel, ([dep] if dep else []) + indep) if page_conninfo else \
            "no connection for page reads"
        if why is None:
            try:
                return _read_strider(conn, page_conninfo, rel, dep, indep, connections)
            except StriderFallback as exc:
                why = str(exc)
        if path == "strider":
            raise InDBError(f"the Strider cannot read {rel.name}: {why}")
    return _read_copy(conn, rel, dep, indep)


def _is_array(rel: RelationInfo, indep: list[str]) -> bool:
    return len(indep) == 1 and rel.types[indep[0]] in ARRAY_TYPES


def _read_strider(conn, conninfo, rel, dep, indep, connections) -> TrainingData:
    t0 = time.perf_counter()
    array = indep[0] if _is_array(rel, indep) else None
    scalars = ([dep] if dep else []) + ([] if array else indep)
    unique = list(dict.fromkeys(scalars))
    res = strider.read(conn, conninfo, rel, unique, array, connections=connections)
    scal = res.scal[:, [unique.index(c) for c in scalars]]
    valid = res.valid
    keep = slice(None) if valid.all() else valid  # no copy of the feature matrix when every row is usable
    y = scal[keep, 0] if dep is not None else None
    X = res.arr[keep] if array else scal[keep, (1 if dep is not None else 0):]
    return TrainingData(np.ascontiguousarray(X), y, len(valid), int((~valid).sum()), "strider",
                        time.perf_counter() - t0)


def _read_copy(conn: psycopg.Connection, rel: RelationInfo, dep: str | None, indep: list[str]) -> TrainingData:
    t0 = time.perf_counter()
    fields: list[sql.Composable] = []
    if dep is not None:
        fields.append(sql.SQL("{}::float8").format(sql.Identifier(dep)))
    array_field = -1
    if _is_array(rel, indep):
        array_field = len(fields)
        fields.append(sql.SQL("{}::float8[]").format(sql.Identifier(indep[0])))
    else:
        fields.extend(sql.SQL("{}::float8").format(sql.Identifier(c)) for c in indep)
    query = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT (FORMAT BINARY)").format(sql.SQL(", ").join(fields), rel.ident)
    with conn.cursor() as cur:
        with cur.copy(query) as copy:
            data = b"".join(bytes(chunk) for chunk in copy)
    scal, arr, valid = copybinary.decode(data, len(fields), array_field)
    y = scal[valid, 0] if dep is not None else None
    X = arr[valid] if array_field >= 0 else scal[valid, (1 if dep is not None else 0):]
    return TrainingData(np.ascontiguousarray(X), y, len(valid), int((~valid).sum()), "copy",
                        time.perf_counter() - t0)
