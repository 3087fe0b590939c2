"""The PL/Python session a function body runs in: its prepared statements (kept in the
function's ``SD``, prepared once per session), the search_path switches of the caller's SQL, and
learnedidx's errors raised as PostgreSQL's, with their SQLSTATE and hint."""
from __future__ import annotations

import functools
import json
from typing import Any, Callable

from learnedidx.errors import LearnedIdxError, RemoteError

#: The search_path every function of the extension pins (and returns to after the caller's SQL).
PINNED = "pg_catalog, pg_temp"
_SET_PATH = "SELECT pg_catalog.set_config('search_path', $1, true)"


class Session:
    """``plpy`` and the function's ``SD``: ``plan(name)`` is the statement ``statements``
    names, prepared on first use in this session."""

    def __init__(self, plpy: Any, SD: dict, statements: dict[str, tuple[str, list[str]]]) -> None:
        self.plpy, self.SD = plpy, SD
        self._plans = SD.setdefault("learnedidx plans", {})
        self._statements = {**statements, "search_path": (_SET_PATH, ["text"])}

    def plan(self, name: str) -> Any:
        p = self._plans.get(name)
        if p is None:
            query, types = self._statements[name]
            p = self._plans[name] = self.plpy.prepare(query, types)
        return p

    def run(self, name: str, *args: Any) -> Any:
        """Statement ``name``'s rows."""
        return self.plpy.execute(self.plan(name), list(args))

    def one(self, name: str, *args: Any) -> dict:
        """The first row of statement ``name``."""
        return self.run(name, *args)[0]

    def execute(self, query: str, types: list[str] | None = None, args: list | None = None) -> Any:
        """A statement made for this call, prepared: one statement (the caller's expressions in
        it can add no other), with parameters of ``types``."""
        return self.plpy.execute(self.plpy.prepare(query, types or []), args or [])

    def as_caller(self, caller_path: str, run: Callable[[], Any]) -> Any:
        """``run()`` with the caller's search_path: SQL that names the caller's objects (the
        source, the expressions); the pinned path is set again after it."""
        self.run("search_path", caller_path)
        out = run()
        self.run("search_path", PINNED)
        return out

    def quote_ident(self, name: str) -> str:
        return self.plpy.quote_ident(name)

    def quote_literal(self, value: str) -> str:
        return self.plpy.quote_literal(value)


def server_result(raw: str) -> dict:
    """The result of the server's reply ``raw`` (JSON text), or its error raised (with the
    reply's SQLSTATE)."""
    reply = json.loads(raw)
    if not reply.get("ok"):
        e = reply.get("error") or {}
        err = RemoteError(e.get("kind") or "internal", e.get("message", "unknown error"))
        err.sqlstate = e.get("sqlstate") or "XX000"
        raise err
    return reply["result"]


def raise_in_postgres(plpy: Any, exc: LearnedIdxError) -> None:
    """Raise ``exc`` as PostgreSQL's error: its message, SQLSTATE and hint (an error reply of
    the server as ``learnedidx: <its message>``, with the reply's SQLSTATE)."""
    message = f"learnedidx: {exc.message}" if isinstance(exc, RemoteError) else str(exc)
    if exc.hint:
        plpy.error(message, sqlstate=exc.sqlstate, hint=exc.hint)
    plpy.error(message, sqlstate=exc.sqlstate)


def sql_function(body: Callable[..., Any]) -> Callable[..., Any]:
    """A function body called as ``body(plpy, SD, ...)``, whose learnedidx errors PostgreSQL
    raises as its own (errors of PostgreSQL itself pass through as they are)."""
    @functools.wraps(body)
    def call(plpy: Any, SD: dict, *args: Any, **kwargs: Any) -> Any:
        try:
            return body(plpy, SD, *args, **kwargs)
        except LearnedIdxError as exc:
            raise_in_postgres(plpy, exc)
    return call
