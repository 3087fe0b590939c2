"""In-database ML for PostgreSQL (DAnA design): snapshot-consistent reads, the engine, the DSL.

``learnedidx.indb.register(conn_or_engine, name, source)`` registers a DSL algorithm.
"""
from __future__ import annotations


def register(conn_or_engine, name: str, source: str) -> None:
    """Register a DSL algorithm (see :mod:`learnedidx.indb.dsl`) in the database."""
    from learnedidx.indb.dsl import register as _register

    _register(conn_or_engine, name, source)


__all__ = ["register"]
