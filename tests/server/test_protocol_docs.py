"""docs/protocol.md and docs/accelerator.md say what a client meets on the wire: the
version in every frame, the hello the server sends first, the fields of an error reply, how
long ``--daemon`` waits; each is checked here against a server (or the code that sets it)."""
from __future__ import annotations

import inspect
import json
import re
import socket
import threading
from pathlib import Path

import pytest

from learnedidx.errors import SQLSTATES
from learnedidx.server import cli
from learnedidx.server import protocol as P
from learnedidx.server.server import Server, ServerConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"
PROTOCOL = (DOCS / "protocol.md").read_text()
ACCELERATOR = (DOCS / "accelerator.md").read_text()


@pytest.fixture
def server(tmp_path):
    srv = Server(ServerConfig(socket_path=str(tmp_path / "docs.sock")))
    srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.stop()
    t.join(timeout=30)


def _frame(s: socket.socket) -> tuple[bytes, int, int, dict]:
    """One frame as it arrives: magic, version, flags, JSON payload."""
    head = b""
    while len(head) < P.HEADER.size:
        head += s.recv(P.HEADER.size - len(head))
    magic, version, flags, length = P.HEADER.unpack(head)
    body = b""
    while len(body) < length:
        body += s.recv(length - len(body))
    return magic, version, flags, json.loads(body)


def test_every_documented_version_is_the_protocols():
    assert re.search(r"^# Accelerator server protocol, version (\d+)$", PROTOCOL, re.M).group(1) == str(P.VERSION)
    assert re.search(r"\| 2 \| protocol version, `(\d+)` \|", PROTOCOL).group(1) == str(P.VERSION)
    assert re.findall(r'`b"LX" \| version (\d+) \|', ACCELERATOR) == [str(P.VERSION)]
    assert re.findall(r'"protocol": (\d+)', ACCELERATOR) == [str(P.VERSION)] * 2  # health, hello


def test_the_hello_comes_first_as_documented(server):
    documented = json.loads(re.search(r"^`(\{\"hello\".*\})`$", PROTOCOL, re.M).group(1))
    assert json.loads(re.search(r"^hello: +(\{.*\})$", ACCELERATOR, re.M).group(1)) == documented
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(server.config.socket_path)
        magic, version, flags, hello = _frame(s)  # before the client has sent a byte
        assert (magic, version, flags) == (P.MAGIC, P.VERSION, P.JSON) and hello == documented


def test_an_error_reply_has_the_documented_fields(server):
    documented = re.search(r'`\{"id": <same>, "ok": false, "error": \{(.*?)\}\}`', PROTOCOL).group(1)
    fields = re.findall(r'"(\w+)":', documented)
    assert fields == ["kind", "sqlstate", "message"]
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(server.config.socket_path)
        _frame(s)
        P.write_frame(s, {"id": 3, "args": {}})  # no op: bad-request
        _, _, _, reply = _frame(s)
    assert reply["id"] == 3 and reply["ok"] is False and list(reply["error"]) == fields
    assert reply["error"]["kind"] == "bad-request" and reply["error"]["sqlstate"] == SQLSTATES["bad-request"]
    assert '"kind": "bad-request", "sqlstate": "%s"' % SQLSTATES["bad-request"] in ACCELERATOR


def test_the_daemons_documented_wait_is_the_codes():
    documented = re.search(r"\| `--daemon` \| off \|.*\(up to (\d+) s\) \|", ACCELERATOR).group(1)
    waits = re.findall(r"wait_ready\([^,]+, (\d+),", inspect.getsource(cli))
    assert waits == [documented]
