"""The training functions' arguments, checked before anything is read or written.

This layer checks what only the database knows or what arrives as SQL text: that arguments
are given, the params object, learnedidx.reader and learnedidx.threads (GUC text), MADlib's
strings, the names of grouping columns and output tables.  The server checks every training
parameter's type and range itself, again where a value passes through both (threads): it takes
requests from any process of the database's OS user (docs/indb.md, "Which layer checks what").
"""
from __future__ import annotations

import json
from typing import Any, Collection, NamedTuple

from learnedidx import checks
from learnedidx.errors import DuplicateColumnError, NameTooLongError, NotSupportedError, ParameterError, \
    UndefinedColumnError
from learnedidx.indb.udf import catalog
from learnedidx.indb.udf.selectlist import ident, one_expression, split_top


def required(**values: str | None) -> None:
    """Each argument given and not blank."""
    for name, value in values.items():
        if value is None or not value.strip():
            raise ParameterError(f"{name} must not be empty")


def params_object(params: str | None) -> dict:
    """The training parameters: a JSON object (the text PL/Python gets for a jsonb)."""
    opts = json.loads(params) if params else {}
    if not isinstance(opts, dict):
        raise ParameterError(f"params must be a JSON object, not {params}")
    return opts


def unsupported(algorithm: str, opts: dict) -> None:
    """Refuse what the function takes as MADlib does but this engine does not do (taking the
    options out of ``opts``)."""
    if opts.get("grouping_cols") is not None and algorithm not in catalog.GROUPABLE:
        raise NotSupportedError(f"grouping_cols is supported by {', '.join(catalog.GROUPABLE[:-1])} and "
                                f"{catalog.GROUPABLE[-1]}, not {algorithm}")
    if opts.get("heteroskedasticity_option") and algorithm != "linregr":
        raise NotSupportedError(f"heteroskedasticity_option (the Breusch-Pagan test) is linregr's, not {algorithm}'s")


def reader(value: str | None) -> str:
    """The reader learnedidx.reader (or params' reader) names: auto, pages or query."""
    value = value or "auto"
    if value not in catalog.READERS:
        raise ParameterError(f"reader (learnedidx.reader) must be auto, pages or query, not {value!r}")
    return catalog.READERS[value]


def threads(value: Any) -> int | None:
    """The engine threads asked for (params' threads, else learnedidx.threads; None: the
    server's limit)."""
    if value is None:
        return None
    return checks.integer("threads (learnedidx.threads)", value, 1, error=ParameterError, parse=True)


#: PostgreSQL's longest identifier, in bytes (NAMEDATALEN - 1).
MAX_NAME = 63


class Group(NamedTuple):
    """A grouping column of the output table: ``name``, and the SQL ``expression`` of the
    source it holds (None: the source's column of that name)."""

    name: str
    expression: str | None = None


def grouping_columns(grouping: str, source: str, source_columns: Collection[str] | None,
                     output_columns: Collection[str]) -> list[Group]:
    """The groups ``grouping`` names (MADlib's grouping_cols, comma-separated: columns of the
    source, or expressions of its columns such as ``data->>'bedroom'``, whose output column is
    named by the expression's text, as MADlib names it); ``source_columns``: the source
    table's, None for a query."""
    groups = []
    for item in split_top(grouping):
        name = ident(item)
        expression = None
        if name is None:
            expression = one_expression(item, "grouping_cols")
            name = expression
            if len(name.encode()) > MAX_NAME:
                raise NameTooLongError(f"grouping expression {name} is too long to name its output column "
                                       f"({MAX_NAME} bytes): group by a column of a query source instead")
        if name in output_columns:
            raise DuplicateColumnError(f"grouping column {name} has the name of an output column")
        if expression is None and source_columns is not None and name not in source_columns:
            raise UndefinedColumnError(f'column "{name}" of grouping_cols does not exist in {source}')
        if name in [g.name for g in groups]:
            raise DuplicateColumnError(f"grouping_cols names {name} twice")
        groups.append(Group(name, expression))
    return groups
