"""Wire format of the accelerator server (see docs/protocol.md).

Frames: ``b"LX" | version u8 | flags u8 | length u32 big-endian | payload``; the payload is a
JSON object (flags :data:`JSON`) or, inside the data stream of an ``indb.train`` call, binary
(:data:`DATA` from the caller, :data:`CONTROL` from the server).  The server greets every
connection with a hello frame before anything else.  Arrays of requests and replies travel
through POSIX shared memory (files under ``/dev/shm``, mode 0600), never on the socket: an
array ref is ``{"shm", "dtype", "shape", "offset"}``.
"""
from __future__ import annotations

import json
import math
import os
import socket
import struct
import uuid
from pathlib import Path

import numpy as np

from learnedidx.errors import ProtocolError, TooLargeError

MAGIC = b"LX"
VERSION = 2
HEADER = struct.Struct(">2sBBI")
JSON, DATA, CONTROL = 0, 1, 2  #: frame flags: a JSON object, a data frame, a control frame
HELLO = {"hello": "learnedidx", "protocol": VERSION}  #: the server's first frame on every connection
DEFAULT_MAX_MESSAGE = 64 << 20
DEFAULT_MAX_ARRAY_BYTES = 1 << 30  #: total bytes of one request's arrays the server accepts
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "learnedidx-"


def encode(obj: dict) -> bytes:
    payload = json.dumps(obj, separators=(",", ":")).encode()
    return HEADER.pack(MAGIC, VERSION, JSON, len(payload)) + payload


def encode_binary(flags: int, payload: bytes) -> bytes:
    return HEADER.pack(MAGIC, VERSION, flags, len(payload)) + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        c = sock.recv(min(n, 1 << 20))
        if not c:
            raise ConnectionError("peer closed the connection")
        chunks.append(c)
        n -= len(c)
    return b"".join(chunks)


def read_header(sock: socket.socket, max_message: int = DEFAULT_MAX_MESSAGE) -> tuple[int, int]:
    """(flags, payload length) of the next frame; ProtocolError for a bad header or size."""
    magic, version, flags, length = HEADER.unpack(_recv_exact(sock, HEADER.size))
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r}")
    if version != VERSION:
        raise ProtocolError(f"unsupported protocol version {version}")
    if length > max_message:
        raise ProtocolError(f"message of {length} bytes exceeds the limit of {max_message}")
    return flags, length


def parse_json(payload: bytes) -> dict:
    """A JSON frame's object; ProtocolError when it is not one."""
    try:
        obj = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"payload is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("payload must be a JSON object")
    return obj


def read_frame(sock: socket.socket, max_message: int = DEFAULT_MAX_MESSAGE) -> dict:
    """One JSON message from ``sock``; ProtocolError for a bad header, size, kind or JSON."""
    flags, length = read_header(sock, max_message)
    payload = _recv_exact(sock, length)
    if flags != JSON:
        raise ProtocolError(f"expected a JSON frame, not one with flags {flags}")
    return parse_json(payload)


def read_hello(sock: socket.socket) -> dict:
    """The server's greeting, which precedes everything else on a connection."""
    hello = read_frame(sock)
    if hello.get("hello") != HELLO["hello"]:
        raise ProtocolError("the peer did not greet as a learnedidx server")
    return hello


def write_frame(sock: socket.socket, obj: dict) -> None:
    sock.sendall(encode(obj))


def shm_names(refs: dict) -> list[str]:
    return sorted({r["shm"] for r in refs.values()})


ALIGN = 64  #: byte alignment of each array inside a segment


def export_arrays(arrays: dict[str, np.ndarray]) -> tuple[dict, list[Path]]:
    """Write ``arrays`` into one new shared-memory segment (each at an aligned offset);
    returns (refs, paths to unlink).  One segment per message keeps the system calls — and
    the GIL hand-offs around them — few."""
    if not arrays:
        return {}, []
    shm = f"{SHM_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
    path = SHM_DIR / shm
    refs, parts, offset = {}, [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        refs[name] = {"shm": shm, "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset}
        parts.append((offset, a))
        offset += -(-a.nbytes // ALIGN) * ALIGN
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, offset)
        for off, a in parts:
            view = memoryview(a.reshape(-1).view(np.uint8))
            while len(view):
                n = os.pwrite(fd, view, off)
                view, off = view[n:], off + n
    except BaseException:
        os.close(fd)
        unlink([path])
        raise
    os.close(fd)
    return refs, [path]


def import_arrays(refs: dict, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """The arrays named by ``refs``, copied out of shared memory (one read per segment);
    ProtocolError on a bad ref, TooLargeError when together they exceed ``max_bytes``."""
    if not isinstance(refs, dict):
        raise ProtocolError("arrays must be an object of refs")
    total = 0
    checked: list[tuple[str, str, np.dtype, tuple[int, ...], int, int]] = []
    for name, r in refs.items():
        try:
            shm, dtype, shape, offset = r["shm"], np.dtype(r["dtype"]), tuple(int(x) for x in r["shape"]), int(r.get("offset", 0))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"bad array ref {name!r}: {exc}") from None
        if not isinstance(shm, str) or not shm.startswith(SHM_PREFIX) or "/" in shm or dtype.hasobject:
            raise ProtocolError(f"bad shared-memory name or dtype for {name!r}")
        if any(s < 0 for s in shape) or offset < 0:
            raise ProtocolError(f"bad shape/offset for {name!r}")
        nbytes = math.prod(shape) * dtype.itemsize  # Python ints: no overflow for absurd shapes
        total += nbytes
        if max_bytes is not None and total > max_bytes:
            raise TooLargeError(f"arrays of {total} bytes exceed the limit of {max_bytes}")
        checked.append((name, shm, dtype, shape, offset, nbytes))
    segments: dict[str, bytearray] = {}
    for shm in {c[1] for c in checked}:
        need = max(c[4] + c[5] for c in checked if c[1] == shm)
        try:
            with open(SHM_DIR / shm, "rb", buffering=0) as f:
                size = os.fstat(f.fileno()).st_size
                if need > size:
                    raise ProtocolError(f"arrays in {shm} need {need} bytes; the segment has {size}")
                buf = bytearray(need)
                view, got = memoryview(buf), 0
                while got < need:
                    n = f.readinto(view[got:])
                    if not n:
                        raise ProtocolError(f"segment {shm} shrank while being read")
                    got += n
        except FileNotFoundError:
            raise ProtocolError(f"shared memory {shm} does not exist") from None
        segments[shm] = buf
    return {name: np.frombuffer(segments[shm], dtype, math.prod(shape), offset).reshape(shape)
            for name, shm, dtype, shape, offset, _ in checked}


def unlink(paths) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def default_socket_path() -> str:
    """``$XDG_RUNTIME_DIR/learnedidx/accel.sock`` or ``/tmp/learnedidx-$UID/accel.sock``."""
    env = os.environ.get("LEARNEDIDX_SOCKET")
    if env:
        return env
    base = os.environ.get("XDG_RUNTIME_DIR")
    d = Path(base) / "learnedidx" if base else Path(f"/tmp/learnedidx-{os.getuid()}")
    return str(d / "accel.sock")
