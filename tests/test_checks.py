"""learnedidx.checks, the one definition of value checks, and the layers that use it: each
rule (a bool is no number, numbers are finite, text parsed only where asked) holds in each."""
from __future__ import annotations

import subprocess
import sys
import math
from pathlib import Path

import pytest

import learnedidx
from learnedidx import checks
from learnedidx.errors import BadRequestError, ConfigError, ParameterError

ROOT = Path(learnedidx.__file__).resolve().parent


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1]])
def test_an_integer_is_an_int_and_never_a_bool(value):
    with pytest.raises(ConfigError, match=r"^n must be an integer, not "):
        checks.integer("n", value)


def test_integer_bounds_floats_and_text_where_asked():
    assert checks.integer("n", 5, 1, 5) == 5
    with pytest.raises(ParameterError, match=r"^n must be at least 1 and at most 5, not 6$"):
        checks.integer("n", 6, 1, 5, error=ParameterError)
    with pytest.raises(ConfigError, match=r"^n must be at least 1, not 0$"):
        checks.integer("n", 0, 1)
    assert checks.integer("n", 2.0, whole_floats=True) == 2
    with pytest.raises(ConfigError, match="integer"):
        checks.integer("n", 2.5, whole_floats=True)
    assert checks.integer("n", " 7 ", parse=True) == 7 and checks.integer("n", "-3", parse=True) == -3
    for text in ("7.0", "1_000", "seven", ""):
        with pytest.raises(ConfigError, match="integer"):
            checks.integer("n", text, parse=True)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "nan"])
def test_numbers_are_finite(value):
    with pytest.raises(ConfigError, match=r"^x must be at least 0 and finite, not "):
        checks.number("x", value, 0, parse=True)


def test_number_bounds_and_types():
    assert checks.number("x", 3, 0, 3) == 3.0 and isinstance(checks.number("x", 3), float)
    with pytest.raises(ConfigError, match=r"^x must be greater than 0, at most 3 and finite, not 0$"):
        checks.number("x", 0, 0, 3, above=True)
    with pytest.raises(ConfigError, match=r"^x must be a number, not True$"):
        checks.number("x", True)
    with pytest.raises(ConfigError, match=r"^x must be a number, not '0.5'$"):
        checks.number("x", "0.5")  # text only where asked
    assert checks.number("x", "0.5", parse=True) == 0.5


def test_booleans_text_and_choices():
    assert checks.boolean("b", False) is False
    with pytest.raises(ConfigError, match="b must be true or false, not 1"):
        checks.boolean("b", 1)
    with pytest.raises(ConfigError, match="s must be text, not 3"):
        checks.text("s", 3)
    assert checks.choice("c", "b", ("a", "b")) == "b"
    with pytest.raises(ConfigError, match=r"^c must be one of 'a', 'b', not 'z'$"):
        checks.choice("c", "z", ("a", "b"))


# ------------------------------------------------------------------ the layers that use it
def test_server_limits_refuse_a_bool():
    from learnedidx.server.server import Limits

    with pytest.raises(ConfigError, match="max_threads must be an integer, not True"):
        Limits(max_threads=True)


@pytest.mark.parametrize("setting", [{"units": 2.5}, {"units": True}, {"clock_mhz": math.nan},
                                     {"link_gbps": 0}, {"precision": "fp16"}])
def test_device_parameters_are_checked(setting):
    from learnedidx.accel.config import DeviceConfig

    with pytest.raises(ConfigError, match="device " + next(iter(setting))):
        DeviceConfig(**setting)


def test_training_parameters_and_train_jobs_use_the_same_rules():
    from learnedidx.indb.dsl.settings import checked
    from learnedidx.server.handlers import indb, train

    assert checked("epochs", "5", error=ParameterError) == 5 and checked("epochs", 5.0) == 5
    with pytest.raises(ParameterError, match="max_iter must be an integer, not True"):
        checked("epochs", True, name="max_iter", error=ParameterError)
    with pytest.raises(ParameterError, match="threads must be at least 1"):
        indb._threads({"threads": 0}, 4)
    assert indb._threads({"threads": "16"}, 4) == 4 and indb._threads({}, 3) == 3
    with pytest.raises(BadRequestError, match="job field 'n' must be an integer, not True"):
        train._int({"n": True}, "n", 0, 10)


_STRAY_BOOL_CHECKS = """if True:
    import ast, sys
    from pathlib import Path
    root = Path(sys.argv[1])
    for layer in sys.argv[2:]:
        for path in [root / layer] if layer.endswith(".py") else sorted((root / layer).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and \\
                        "bool" in ast.unparse(node.args[1]):
                    print(f"{path.relative_to(root)}:{node.lineno}")
"""


def test_the_layers_named_keep_no_checks_of_their_own():
    """No module that checks values spells the bool rule out again: they call learnedidx.checks.
    (Parsed in a fresh interpreter: CPython 3.11 before 3.11.5 can raise a SystemError,
    "AST constructor recursion depth mismatch", from ast.parse late in a long process.)"""
    layers = ["index/options.py", "server/handlers/indb.py", "server/handlers/train.py", "indb/dsl/settings.py",
              "server/server.py", "server/backend.py", "accel/config.py", "indb/udf"]
    res = subprocess.run([sys.executable, "-c", _STRAY_BOOL_CHECKS, str(ROOT), *layers], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    stray = res.stdout.split()
    assert stray == []
