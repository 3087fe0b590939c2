"""Reading training data under the caller's snapshot and role (the COPY BINARY path).

Every column is cast to ``float8`` (scalars) or ``float8[]`` (one array column of
features) in the query, so one Numba decoder serves all numeric types; PostgreSQL applies
privileges and row-level security to the query because the session runs as the caller.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from learnedidx.indb import copybinary
from learnedidx.indb.access import ARRAY_TYPES, RelationInfo


@dataclass
class TrainingData:
    X: np.ndarray  # float64 (rows, d): usable rows only
    y: np.ndarray | None  # float64 (rows,)
    rows_total: int
    rows_skipped: int  # rows with a NULL (or NaN-free but NULL array element)
    path: str
    seconds: float


def read_training_data(conn: psycopg.Connection, rel: RelationInfo, dep: str | None, indep: list[str]) -> TrainingData:
    """Labels ``dep`` and features ``indep`` (one array column, or several scalar columns)."""
    t0 = time.perf_counter()
    fields: list[sql.Composable] = []
    if dep is not None:
        fields.append(sql.SQL("{}::float8").format(sql.Identifier(dep)))
    array_field = -1
    if len(indep) == 1 and rel.types[indep[0]] in ARRAY_TYPES:
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
