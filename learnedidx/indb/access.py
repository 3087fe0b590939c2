"""How the server reads what the caller may read: snapshot import, role switch, checks.

The server connects with its own (superuser) role, imports the caller's exported snapshot
so it sees exactly what the calling statement sees, then ``SET ROLE`` to the caller so that
PostgreSQL's own privilege checks and row-level security apply to everything it reads.
"""
from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from learnedidx.errors import InDBError


class SnapshotError(InDBError):
    kind = "snapshot"


class PermissionDeniedError(InDBError):
    kind = "permission-denied"


class UndefinedTableError(InDBError):
    kind = "undefined-table"


class UndefinedColumnError(InDBError):
    kind = "undefined-column"


class UnsupportedTypeError(InDBError):
    kind = "unsupported-type"


NUMERIC_TYPES = {"int2", "int4", "int8", "float4", "float8", "numeric", "bool", "oid"}
ARRAY_TYPES = {"_int2", "_int4", "_int8", "_float4", "_float8", "_numeric"}


@dataclass
class RelationInfo:
    oid: int
    schema: str
    name: str
    relkind: str
    rls: bool
    types: dict  # column -> type name

    @property
    def ident(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.name)


def open_snapshot_session(conninfo: str, *, snapshot: str | None, role: str | None,
                          search_path: str | None = None) -> psycopg.Connection:
    """A REPEATABLE READ transaction on the caller's snapshot, running as the caller's role."""
    try:
        conn = psycopg.connect(conninfo, autocommit=False)
    except psycopg.Error as exc:
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


def check_readable(conn: psycopg.Connection, relation: str, columns: list[str]) -> RelationInfo:
    """Resolve ``relation`` with the caller's search_path and check SELECT on each column."""
    row = conn.execute(
        "SELECT c.oid, n.nspname, c.relname, c.relkind, c.relrowsecurity AND NOT "
        "(SELECT rolbypassrls FROM pg_roles WHERE rolname = current_user) AND "
        "pg_get_userbyid(c.relowner) <> current_user FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = to_regclass(%s)", (relation,)).fetchone()
    if row is None:
        raise UndefinedTableError(f'relation "{relation}" does not exist')
    oid, schema, name, relkind, rls = row
    types = dict(conn.execute(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped", (oid,)).fetchall())
    for col in columns:
        if col not in types:
            raise UndefinedColumnError(f'column "{col}" of relation "{relation}" does not exist')
        t = types[col]
        if t not in NUMERIC_TYPES and t not in ARRAY_TYPES:
            raise UnsupportedTypeError(f'column "{col}" has type {t}; numeric columns or numeric arrays are required')
        ok = conn.execute("SELECT has_column_privilege(current_user, %s, %s, 'SELECT')", (oid, col)).fetchone()[0]
        if not ok:
            raise PermissionDeniedError(f"permission denied for table {name}")
    return RelationInfo(oid, schema, name, relkind, bool(rls), {c: types[c] for c in columns})
