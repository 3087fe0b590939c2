"""The extension's PL/Python code keeps copies of Python constants (it imports the standard
library only): the frame header, the default socket path rule and the query-source pattern.
Each copy must agree with its original; the extension's file is read from the package data."""
from __future__ import annotations

import ast
import itertools
import os
import re
import textwrap

import psycopg
import pytest

from learnedidx.indb import install
from learnedidx.indb.cluster import TempCluster
from learnedidx.indb.read.access import QUERY_SOURCE
from learnedidx.server import protocol
from tests.pgfixtures import PG_BINDIR

SCRIPT = install.read_text("learnedidx--0.1.sql")


def plpython_source(function: str) -> str:
    """The PL/Python source of ``learnedidx.<function>``."""
    m = re.search(rf"^CREATE FUNCTION learnedidx\.{function}\(.*?\$py\$\n(.*?)^\$py\$;", SCRIPT, re.S | re.M)
    assert m, f"no PL/Python function learnedidx.{function}"
    return m.group(1)


def plpython_body(function: str) -> ast.FunctionDef:
    """That source parsed as the function PL/Python wraps it in."""
    return ast.parse(f"def {function}():\n" + textwrap.indent(plpython_source(function), "    ")).body[0]


def assigned(body: ast.FunctionDef, name: str) -> ast.Assign:
    """The top-level assignment of ``name`` (alone or in a tuple) in ``body``."""
    (node,) = [n for n in body.body if isinstance(n, ast.Assign)
               and name in {e.id for e in ast.walk(n.targets[0]) if isinstance(e, ast.Name)}]
    return node


def test_the_frame_header_is_the_protocols():
    header, magic, version = ast.literal_eval(assigned(plpython_body("_call"), "HEADER").value)
    assert (header, magic, version) == (protocol.HEADER.format, protocol.MAGIC, protocol.VERSION)
    src = plpython_source("_call")
    assert src.count(repr(header).replace("'", '"')) == 1 and src.count('b"LX"') == 1  # one copy, used by name
    assert "struct.pack(HEADER, MAGIC, VERSION," in src and "struct.unpack(HEADER," in src


def test_the_query_source_pattern_is_the_readers():
    node = assigned(plpython_body("_train"), "QUERY_SOURCE")
    copy = eval(compile(ast.Expression(node.value), "<plpython>", "eval"), {"re": re})  # noqa: S307 - our own file
    assert (copy.pattern, copy.flags) == (QUERY_SOURCE.pattern, QUERY_SOURCE.flags)


@pytest.mark.parametrize("socket_env,xdg", list(itertools.product([None, "/run/x/accel.sock"], [None, "/run/user/7"])))
def test_the_default_socket_path_follows_the_servers_rule(monkeypatch, socket_env, xdg):
    (fn,) = [n for n in plpython_body("_call").body if isinstance(n, ast.FunctionDef)
             and n.name == "default_socket_path"]
    namespace = {"os": os}
    exec(compile(ast.Module([fn], []), "<plpython>", "exec"), namespace)  # noqa: S102 - our own file
    for var, value in (("LEARNEDIDX_SOCKET", socket_env), ("XDG_RUNTIME_DIR", xdg)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    assert namespace["default_socket_path"]() == protocol.default_socket_path()


@pytest.mark.postgres
def test_the_backend_finds_the_server_through_learnedidx_socket_in_its_environment(accel_server, monkeypatch):
    """With ``learnedidx.socket`` unset, a backend whose environment has LEARNEDIDX_SOCKET
    reaches the server there (a cluster started with it set, as a service file would)."""
    if os.geteuid() == 0:
        pytest.skip("PostgreSQL cannot run as root")
    monkeypatch.setenv("LEARNEDIDX_SOCKET", accel_server.socket_path)
    with TempCluster(PG_BINDIR, settings={"shared_buffers": "32MB", "max_wal_size": "64MB"}) as cluster:
        with psycopg.connect(cluster.conninfo, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION learnedidx CASCADE")
            assert conn.execute("SELECT current_setting('learnedidx.socket', true)").fetchone()[0] in (None, "")
            conn.execute("SELECT learnedidx.register_algorithm('via_env', %s)",
                         ("def gradient(w, x, y):\n    return (dot(w, x) - y) * x\n",))
            assert conn.execute("SELECT name FROM learnedidx.algorithms").fetchall() == [("via_env",)]
            conn.execute("SET learnedidx.socket = '/nonexistent/accel.sock'")  # the setting still wins
            with pytest.raises(psycopg.errors.ConnectionFailure, match="/nonexistent/accel.sock"):
                conn.execute("SELECT learnedidx.register_algorithm('other', 'def gradient(w, x, y):\n    return x\n')")
