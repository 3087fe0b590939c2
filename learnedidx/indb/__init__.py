"""In-database ML for PostgreSQL (DAnA design).

:mod:`.dsl` compiles algorithms, :mod:`.runtime` trains them on arrays, :mod:`.read` reads
the caller's data in its snapshot and role; the server's ``indb.*`` handlers
(:mod:`learnedidx.server.handlers.indb`) put the three together.  ``learnedidx pg install``
(:mod:`.install`) installs the extension.

``learnedidx.indb.register(conn_or_engine, name, source)`` registers a DSL algorithm.
"""
from __future__ import annotations


def register(conn_or_engine, name: str, source: str) -> None:
    """Register a DSL algorithm in a database (psycopg connection or SQLAlchemy engine)
    through ``learnedidx.register_algorithm``; bad source fails here, with the DSL's message."""
    from learnedidx.indb.dsl import compile_algorithm

    compile_algorithm(name, source)
    if hasattr(conn_or_engine, "execute") and hasattr(conn_or_engine, "cursor"):  # psycopg
        conn_or_engine.execute("SELECT learnedidx.register_algorithm(%(name)s, %(source)s)",
                               {"name": name, "source": source})
        return
    from sqlalchemy import text

    with conn_or_engine.begin() as c:
        c.execute(text("SELECT learnedidx.register_algorithm(:name, :source)"), {"name": name, "source": source})


__all__ = ["register"]
