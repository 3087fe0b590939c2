"""The extension's C module keeps copies of Python constants (the frame header and flags, the
stream's control codes, the reply size limit, the default socket path rule).  Each copy must
agree with its original; the C header that holds them is read from the package data."""
from __future__ import annotations

import os
import re

import psycopg
import pytest

from learnedidx.indb import install
from learnedidx.indb.cluster import TempCluster
from learnedidx.server import protocol, stream
from tests.pgfixtures import PG_BINDIR

C_SOURCE = install.read_text("learnedidx.h")


def define(name: str) -> str:
    """The replacement text of ``#define name`` in the C module (its comment stripped)."""
    m = re.search(rf"^#define {name}\s+(.*?)\s*(?:/\*.*)?$", C_SOURCE, re.M)
    assert m, f"no #define {name}"
    return m.group(1)


def c_int(name: str) -> int:
    return eval(define(name), {})  # noqa: S307 - integer expressions of our own file


def test_the_frame_header_is_the_protocols():
    assert define("LX_MAGIC") == '"%s"' % protocol.MAGIC.decode()
    assert c_int("LX_VERSION") == protocol.VERSION and c_int("LX_HEADER") == protocol.HEADER.size
    assert protocol.HEADER.format == ">2sBBI"  # magic, version, flags, big-endian length: put_u32be
    assert (c_int("LX_JSON"), c_int("LX_DATA"), c_int("LX_CONTROL")) == (protocol.JSON, protocol.DATA,
                                                                      protocol.CONTROL)
    assert c_int("LX_MAX_REPLY") == protocol.DEFAULT_MAX_MESSAGE


def test_the_stream_codes_are_the_servers():
    assert (c_int("READ_AS_CHOSEN"), c_int("READ_QUERY"), c_int("READ_ANY_ORDER")) == (
        stream.AS_CHOSEN, stream.QUERY, stream.ANY_ORDER)
    assert (define("SLOT_PAGES"), define("SLOT_ROWS")) == ("'P'", "'R'")
    assert c_int("SLOT_HEADER") == stream.SLOT.size and stream.SLOT.format == ">ccxxIII"  # put_u32be at 4, 8, 12
    assert stream.CONTROL.format == ">cBxxI" and stream.FREE.format == ">c3xI" and stream.RING.format == ">c3xII16s"
    assert c_int("RING_TOKEN") == 16 and c_int("RING_FRAME") == stream.RING.size
    # the ring the server makes is one the backend maps
    assert 1 <= stream.RING_SLOTS <= c_int("RING_MAX_SLOTS")
    assert stream.SLOT_BYTES % stream.PAGE_SIZE == 0 and stream.PAGE_SIZE <= stream.SLOT_BYTES <= c_int(
        "RING_MAX_SLOT_BYTES")
    # a slot frame with every block number of a full slot fits a frame
    assert stream.SLOT.size + 4 * stream.SLOT_BYTES // stream.PAGE_SIZE <= protocol.DEFAULT_MAX_MESSAGE


@pytest.mark.postgres
@pytest.mark.parametrize("socket_env,xdg", [(None, None), ("/run/x/accel.sock", "/run/user/7"),
                                            (None, "/run/user/7/")])
def test_the_default_socket_path_follows_the_servers_rule(monkeypatch, socket_env, xdg):
    """learnedidx.socket unset: the backend's default is the server's rule, in its environment."""
    if os.geteuid() == 0:
        pytest.skip("PostgreSQL cannot run as root")
    for var, value in (("LEARNEDIDX_SOCKET", socket_env), ("XDG_RUNTIME_DIR", xdg)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    with TempCluster(PG_BINDIR, settings={"shared_buffers": "16MB", "max_wal_size": "64MB"}) as cluster:
        with psycopg.connect(cluster.conninfo, autocommit=True) as conn:
            conn.execute("LOAD 'learnedidx'")
            assert conn.execute("SELECT current_setting('learnedidx.socket')").fetchone()[0] == \
                protocol.default_socket_path()


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
            conn.execute("SELECT learnedidx.register_algorithm('via_env', %s)",
                         ("def gradient(w, x, y):\n    return (dot(w, x) - y) * x\n",))
            assert conn.execute("SELECT name FROM learnedidx.algorithms").fetchall() == [("via_env",)]
            conn.execute("SET learnedidx.socket = '/nonexistent/accel.sock'")  # the setting still wins
            with pytest.raises(psycopg.errors.ConnectionFailure, match="/nonexistent/accel.sock"):
                conn.execute("SELECT learnedidx.register_algorithm('other', 'def gradient(w, x, y):\n    return x\n')")
