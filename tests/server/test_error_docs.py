"""docs/accelerator.md and docs/protocol.md name the error kinds of learnedidx/errors.py:
every kind they name exists with the class they name, and every kind is accounted for."""
from __future__ import annotations

import re
from pathlib import Path

from learnedidx import errors

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: Kinds raised in the client process (store, workloads, an unreachable server) or by
#: ``learnedidx server start|stop``, never replies.
CLIENT_SIDE = {"argument-type", "argument", "key-type", "key-length", "record-too-large", "store-closed",
               "store-forked", "store-locked", "corrupt-log", "store-io", "log-failed", "workload", "trace-format",
               "unavailable", "unsafe-path", "server-running", "no-pidfile",
               # raised by the extension's training functions in the database (learnedidx/indb/udf)
               "sql-syntax", "undefined-column", "duplicate-column", "duplicate-table", "name-too-long",
               "not-a-model", "insufficient-privilege"}


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start:end if end > 0 else None]


def test_accelerator_md_error_table_matches_the_error_table():
    section = _section((DOCS / "accelerator.md").read_text(), "### Error kinds")
    rows = [line.split("|")[1:4] for line in section.splitlines() if line.startswith("| `")]
    documented = set()
    for kinds_cell, class_cell, _ in rows:
        kinds = re.findall(r"`([a-z-]+)`", kinds_cell)
        cls = re.search(r"`(\w+)`", class_cell).group(1)
        for kind in kinds:
            assert kind in errors.SQLSTATES, kind
            assert issubclass(errors.error_class(kind), getattr(errors, cls)), (kind, cls)
            documented.add(kind)
    assert documented == set(errors.SQLSTATES) - CLIENT_SIDE
    rest = re.search(r"never come from the\s+server: (.*?)\.\n", section, re.S).group(1)
    assert set(re.findall(r"`([a-z-]+)`", rest)) | {"unavailable"} == CLIENT_SIDE
    assert "`ServerUnavailableError` (kind `unavailable`)" in section
    assert errors.ServerUnavailableError.kind == "unavailable"


def test_protocol_md_names_the_same_kinds():
    section = _section((DOCS / "protocol.md").read_text(), "## Error kinds")
    named = set(re.findall(r"`([a-z-]+)`", section.split("; see")[0]))
    assert named == set(errors.SQLSTATES) - CLIENT_SIDE
