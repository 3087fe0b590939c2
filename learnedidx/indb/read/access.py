"""How the server reads what the caller may read: snapshot import, the caller's role, checks.

The server logs in *as the caller* (the caller's ``session_user``), imports the caller's
exported snapshot so it sees exactly what the calling statement sees, and ``SET ROLE`` to
the caller's ``current_user`` when that differs, so that PostgreSQL's own privilege checks
and row-level security apply to everything it reads.  It never switches roles from a
superuser session: views, policies and functions the caller controls run in this session,
and from a superuser ``session_user`` they could ``SET ROLE`` back to the superuser.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from learnedidx.errors import (InDBError, LoginError, PermissionDeniedError, SnapshotError, UndefinedColumnError,
                               UndefinedTableError, UnsupportedTypeError)


NUMERIC_TYPES = {"int2", "int4", "int8", "float4", "float8", "numeric", "bool", "oid"}
ARRAY_TYPES = {"_int2", "_int4", "_int8", "_float4", "_float8", "_numeric"}


#: A training source starting like this is a query (read on the COPY path), not a relation name.
QUERY_SOURCE = re.compile(r"\s*(\(|(select|with|values)\b)", re.IGNORECASE)


@dataclass
class RelationInfo:
    oid: int  # 0 for a query
    schema: str
    name: str
    relkind: str  # pg_class.relkind, or "q" for a query
    rls: bool
    types: dict  # column -> type name
    query: str | None = None

    @property
    def ident(self) -> sql.Composable:
        """What to put after FROM: the relation, or the query as a subquery."""
        if self.query is not None:
            return sql.SQL("({}) AS src").format(sql.SQL(self.query))
        return sql.Identifier(self.schema, self.name)


def open_snapshot_session(conninfo: str, *, snapshot: str | None, login: str | None, role: str | None = None,
                          search_path: str | None = None) -> psycopg.Connection:
    """A read-only REPEATABLE READ transaction on the caller's snapshot, logged in as ``login``.

    ``role`` (the caller's ``current_user``) is set with ``SET ROLE`` when it differs from
    ``login``; ``login=None`` keeps the user of ``conninfo``.
    """
    try:
        conn = psycopg.connect(make_conninfo(conninfo, **({"user": login} if login else {})), autocommit=False)
    except psycopg.OperationalError as exc:
        if login and ("authentication" in str(exc) or "not permitted to log in" in str(exc)):
            raise LoginError(f"the accelerator server cannot log in to PostgreSQL as role {login} (it reads "
                             f"data as the caller; allow it in pg_hba.conf, see docs/indb.md): {exc}") from None
        raise InDBError(f"the accelerator server cannot connect to PostgreSQL: {exc}") from None
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    try:
        if snapshot:
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        if search_path:
            conn.execute("SELECT set_config('search_path', %s, true)", (search_path,))
        if role:
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    except psycopg.Error as exc:
        conn.close()
        raise SnapshotError(f"cannot import the caller's snapshot or role: {exc}") from None
    return conn


def _check_types(columns: list[str], types: dict, relation: str) -> None:
    for col in columns:
        if col not in types:
            raise UndefinedColumnError(f'column "{col}" of relation "{relation}" does not exist')
        t = types[col]
        if t not in NUMERIC_TYPES and t not in ARRAY_TYPES:
            raise UnsupportedTypeError(f'column "{col}" has type {t}; numeric columns or numeric arrays are required')


def _query_info(conn: psycopg.Connection, query: str, columns: list[str]) -> RelationInfo:
    """Output column types of a query source (planned and privilege-checked as the caller)."""
    try:  # one statement only: the extended protocol refuses several
        cur = conn.execute(sql.SQL("SELECT * FROM ({}) AS src LIMIT 0").format(sql.SQL(query)))
    except psycopg.errors.UndefinedTable as exc:
        raise UndefinedTableError(str(exc).splitlines()[0]) from None
    except psycopg.errors.UndefinedColumn as exc:
        raise UndefinedColumnError(str(exc).splitlines()[0]) from None
    except psycopg.errors.InsufficientPrivilege as exc:
        raise PermissionDeniedError(str(exc).splitlines()[0]) from None
    except psycopg.Error as exc:
        raise InDBError(f"the source query is not valid: {str(exc).splitlines()[0]}") from None
    oids = [d.type_code for d in cur.description]
    names = dict(conn.execute("SELECT oid::int, typname::text FROM pg_type WHERE oid = ANY(%s)", (oids,)).fetchall())
    types = {d.name: names.get(d.type_code, "?") for d in cur.description}
    _check_types(columns, types, "(query)")
    return RelationInfo(0, "", "(query)", "q", False, {c: types[c] for c in columns}, query)


def check_readable(conn: psycopg.Connection, relation: str, columns: list[str]) -> RelationInfo:
    """Resolve ``relation`` (a name, with the caller's search_path, or a query: see
    :data:`QUERY_SOURCE`) and check that the caller may SELECT each column."""
    if QUERY_SOURCE.match(relation):
        return _query_info(conn, relation, columns)
    row = conn.execute(
        "SELECT c.oid, n.nspname, c.relname, c.relkind, row_security_active(c.oid) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = to_regclass(%s)", (relation,)).fetchone()
    if row is None:
        raise UndefinedTableError(f'relation "{relation}" does not exist')
    oid, schema, name, relkind, rls = row
    types = dict(conn.execute(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped", (oid,)).fetchall())
    _check_types(columns, types, relation)
    for col in columns:
        ok = conn.execute("SELECT has_column_privilege(current_user, %s, %s, 'SELECT')", (oid, col)).fetchone()[0]
        if not ok:
            raise PermissionDeniedError(f"permission denied for table {name}")
    return RelationInfo(oid, schema, name, relkind, bool(rls), {c: types[c] for c in columns})
