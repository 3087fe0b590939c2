"""The one error table: kinds, SQLSTATEs, and the copies other components keep of it."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import learnedidx
from learnedidx import errors

EXTENSION_SQL = Path(__file__).resolve().parents[1] / "extension" / "learnedidx--0.1.sql"
UDF = Path(learnedidx.__file__).resolve().parent / "indb" / "udf"


def test_every_kind_has_one_class_and_a_valid_sqlstate():
    for kind, state in errors.SQLSTATES.items():
        assert errors.error_class(kind).kind == kind
        assert re.fullmatch(r"[0-9A-Z]{5}", state), (kind, state)
    # XX000 is for real bugs only: the one kind that maps to it is "internal".
    assert [k for k, s in errors.SQLSTATES.items() if s == "XX000"] == ["internal"]


def test_a_kind_cannot_be_declared_twice():
    with pytest.raises(TypeError, match="declared twice"):
        class Again(errors.LearnedIdxError, kind="config"):  # noqa: F841
            pass


def test_the_extension_keeps_no_copy_of_the_table_and_raises_the_replys_sqlstate():
    """The server's error replies carry the SQLSTATE of the table; the SQL side (the script and
    its PL/Python modules) raises with it."""
    src = EXTENSION_SQL.read_text()
    udf = "".join(p.read_text() for p in UDF.glob("*.py"))
    kinds = [k for k in errors.SQLSTATES if k != "internal"]
    assert not [k for k in kinds if f"'{k}'" in src + udf or f'"{k}"' in src + udf]  # no kind is spelled out
    assert "reply->'error'->>'sqlstate'" in src and 'e.get("sqlstate")' in udf


def test_no_error_class_lives_outside_errors_py():
    """One home for errors: no other module of the package defines an exception class."""
    strays = []
    for mod in pkgutil.walk_packages(learnedidx.__path__, "learnedidx."):
        module = importlib.import_module(mod.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == mod.name \
                    and mod.name != "learnedidx.errors":
                strays.append(f"{mod.name}.{name}")
    assert strays == []


def test_remote_errors_carry_the_kind_and_sqlstate_of_the_reply():
    e = errors.RemoteError("division-by-zero", "no")
    assert e.kind == "division-by-zero" and e.sqlstate == "22012"
    assert errors.kind_of(e) == "division-by-zero" and errors.kind_of(KeyError("x")) == "internal"
    assert errors.is_offload_failure(errors.RemoteError("internal", "boom"))
    assert not errors.is_offload_failure(errors.RemoteError("config", "features exceed the device"))
    assert not errors.is_offload_failure(errors.ConfigError("x"))
    assert errors.is_offload_failure(errors.ServerUnavailableError("down"))


def test_every_error_survives_pickling():
    """Errors cross processes (a multiprocessing pool, the benchmarks' workers): each must
    come back as the same class with the same message and attributes."""
    import pickle

    special = {errors.RemoteError: ("device", "the device failed"),
               errors.TraceFormatError: (7, "bad field"),
               errors.CorruptLogError: ("damaged", "/x/wal", 12)}
    classes = [c for c in vars(errors).values()
               if inspect.isclass(c) and issubclass(c, errors.LearnedIdxError)]
    for cls in classes:
        exc = cls(*special.get(cls, ("some message",)))
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is cls and str(back) == str(exc), cls
        assert {k: v for k, v in vars(back).items()} == {k: v for k, v in vars(exc).items()}, cls
