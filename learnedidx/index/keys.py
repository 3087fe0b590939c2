"""Keys and values as the store takes them: type and length checks, and key batches packed
for the search kernels."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from learnedidx.errors import KeyLengthError, KeyTypeError
from learnedidx.index import pyobjects as P


@dataclass
class KeyBatch:
    """Keys as one arena + offsets (exact bytes, NULs included): the zero-copy batch input."""

    arena: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_keys(cls, keys: Sequence[bytes]) -> "KeyBatch":
        lens = np.fromiter((len(k) for k in keys), np.int64, len(keys))
        offsets = np.zeros(len(keys) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        return cls(np.frombuffer(b"".join(keys), np.uint8), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def key(self, i: int) -> bytes:
        return self.arena[self.offsets[i]:self.offsets[i + 1]].tobytes()

    def keys(self) -> list[bytes]:
        ab, ol = self.arena.tobytes(), self.offsets.tolist()
        return [ab[ol[i]:ol[i + 1]] for i in range(len(ol) - 1)]


def check_key(key: Any, max_len: int) -> bytes:
    """``key`` as exactly ``bytes`` (``str`` encoded UTF-8), 1..``max_len`` bytes long."""
    if type(key) is bytes:
        k = key
    elif isinstance(key, bytes):
        k = bytes(key)
    elif isinstance(key, str):
        k = key.encode("utf-8")
    elif isinstance(key, (bytearray, memoryview)):
        k = bytes(key)
    else:
        raise KeyTypeError(f"keys must be bytes or str, not {type(key).__name__}")
    if not 1 <= len(k) <= max_len:
        raise KeyLengthError(f"key length {len(k)} outside 1..{max_len} bytes")
    return k


def check_value(value: Any) -> bytes:
    """``value`` as exactly ``bytes``."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise KeyTypeError(f"values must be bytes, not {type(value).__name__}")


def check_values(values: Sequence[Any]) -> list[bytes]:
    """``values`` as a list of ``bytes`` (the list itself when it already is one)."""
    if isinstance(values, list) and set(map(type, values)) <= {bytes}:
        return values
    return [check_value(v) for v in values]


def check_count(count: Any) -> int:
    """A scan's ``count``: an int >= 0."""
    if not isinstance(count, int) or isinstance(count, bool):
        raise TypeError(f"count must be an int, not {type(count).__name__}")
    if count < 0:
        raise ValueError("count must be >= 0")
    return count


def _listed(keys: Any) -> list:
    if isinstance(keys, np.ndarray) and keys.dtype.kind == "S":
        return keys.tolist()  # numpy 'S' items lose trailing NUL bytes
    return keys if isinstance(keys, list) else list(keys)


def key_list(keys: Any, max_len: int) -> list[bytes]:
    """``keys`` as a list of checked ``bytes`` (the list itself when it already is one)."""
    if isinstance(keys, KeyBatch):
        return keys.keys()
    klist = _listed(keys)
    if klist and set(map(type, klist)) == {bytes} and min(map(len, klist)) >= 1 \
            and max(map(len, klist)) <= max_len:
        return klist
    return [check_key(k, max_len) for k in klist]


def as_batch(keys: Any, max_len: int) -> tuple[KeyBatch, list[bytes] | None]:
    """``keys`` packed for the search kernels, and as a list of checked ``bytes`` (None
    when they came as a :class:`KeyBatch`)."""
    if isinstance(keys, KeyBatch):
        return keys, None
    klist = _listed(keys)
    if P.LAYOUT_OK and len(klist) > 16:
        # One compiled pass over the list's items (the usual case: all exact bytes of
        # valid lengths); anything else takes the checking path below.
        arena, offsets, bad = P.pack_bytes_list(id(klist), max_len, P.BYTES_TYPE)
        if bad < 0:
            return KeyBatch(arena, offsets), klist
    klist = key_list(klist, max_len)
    offsets = np.fromiter(itertools.accumulate(map(len, klist), initial=0), np.int64, len(klist) + 1)
    return KeyBatch(np.frombuffer(b"".join(klist), np.uint8), offsets), klist
