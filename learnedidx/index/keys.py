"""Keys and values as the store takes them: type and length checks, and key batches packed
for the search kernels."""
from __future__ import annotations

import itertools
import numbers
import operator
import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from learnedidx.errors import ArgumentError, ArgumentTypeError, KeyLengthError, KeyTypeError
from learnedidx.index import pyobjects as P


@dataclass
class KeyBatch:
    """Keys as one arena + offsets (exact bytes, NULs included): the zero-copy batch input.

    ``arena`` is any bytes-like (kept as a uint8 array, not copied), ``offsets`` the ``n + 1``
    offsets of the keys in it: from 0 or more, never decreasing, none past the arena's end
    (else :class:`~learnedidx.errors.ArgumentError`)."""

    arena: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        try:
            self.arena = np.frombuffer(self.arena, np.uint8) if not isinstance(self.arena, np.ndarray) \
                else self.arena.reshape(-1).view(np.uint8)
            offsets = np.asarray(self.offsets)
        except (TypeError, ValueError) as exc:
            raise ArgumentTypeError(f"a KeyBatch is a bytes-like arena and integer offsets ({exc})") from None
        if offsets.ndim != 1 or len(offsets) < 1 or (len(offsets) > 1 and offsets.dtype.kind not in "iu"):
            raise ArgumentTypeError("KeyBatch offsets must be a 1-d sequence of n + 1 integers")
        self.offsets = np.ascontiguousarray(offsets, np.int64)
        self.check()

    def check(self) -> None:
        """ArgumentError unless the offsets describe keys inside the arena (see the class)."""
        o = self.offsets
        if o[0] < 0 or o[-1] > len(self.arena) or (len(o) > 1 and bool(np.any(o[1:] < o[:-1]))):
            raise ArgumentError(f"KeyBatch offsets must start at 0 or more, never decrease and end at most at "
                                f"the arena's {len(self.arena)} bytes")

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

    @classmethod
    def joined(cls, parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> "KeyBatch":
        """The keys of several runs, in order, as one batch; a run is an arena and the
        offsets of its keys in it (which need not start at 0)."""
        if not parts:
            return cls(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        if len(parts) == 1 and parts[0][1][0] == 0 and parts[0][1][-1] == len(parts[0][0]):
            return cls(*parts[0])  # already one batch, its arena exactly its keys
        arena = np.concatenate([a[o[0]:o[-1]] for a, o in parts])
        offsets = np.empty(sum(len(o) - 1 for _, o in parts) + 1, np.int64)
        offsets[0] = at = base = 0
        for _, o in parts:
            k = len(o) - 1
            offsets[at + 1:at + k + 1] = o[1:] - o[0] + base
            at += k
            base += int(o[-1] - o[0])
        return cls(arena, offsets)


#: One key or value, where a sequence of them is expected, is refused: iterating it would
#: silently write its characters (or byte values) one by one.
_SCALARS = (str, bytes, bytearray, memoryview)

#: Counts above this are the same as "every key": capped so that arithmetic on them
#: (``2 * count + 16``, slice bounds) stays within a C ``ssize_t``.
MAX_COUNT = sys.maxsize // 4


def check_key(key: Any, max_len: int) -> bytes:
    """``key`` as exact ``bytes`` (``str`` encoded UTF-8, subclasses of ``bytes`` such as
    ``numpy.bytes_`` converted), 1..``max_len`` bytes long."""
    if type(key) is bytes:
        k = key
    elif isinstance(key, str):
        try:
            k = key.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate has no UTF-8 form
            raise KeyTypeError(f"a str key must be encodable as UTF-8 ({exc.reason} at {exc.start})") from None
    elif isinstance(key, (bytes, bytearray, memoryview)):
        k = bytes(key)
    else:
        raise KeyTypeError(f"keys must be bytes or str, not {type(key).__name__}")
    if not 1 <= len(k) <= max_len:
        raise KeyLengthError(f"key length {len(k)} outside 1..{max_len} bytes")
    return k


def check_value(value: Any) -> bytes:
    """``value`` as exact ``bytes``."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise KeyTypeError(f"values must be bytes, not {type(value).__name__}")


def check_values(values: Any) -> list[bytes]:
    """``values`` as a list of ``bytes`` (the list itself when it already is one)."""
    if isinstance(values, list) and set(map(type, values)) <= {bytes}:
        return values
    return [check_value(v) for v in sequence(values, "values")]


def check_same_length(nkeys: int, nvalues: int) -> None:
    """A batch has one value per key."""
    if nkeys != nvalues:
        raise ArgumentError(f"{nkeys} keys but {nvalues} values")


def check_count(count: Any) -> int:
    """A scan's ``count``: an integer >= 0 (numpy integers too; not bool); counts past
    :data:`MAX_COUNT` mean every key and are capped to it."""
    if isinstance(count, bool) or not isinstance(count, numbers.Integral):
        raise ArgumentTypeError(f"count must be an int, not {type(count).__name__}")
    c = operator.index(count)
    if c < 0:
        raise ArgumentError(f"count must be >= 0, not {c}")
    return min(c, MAX_COUNT)


def check_counts(count: Any, n: int) -> list[int]:
    """:func:`check_count` of one count for ``n`` scans, or of one count per scan."""
    if isinstance(count, numbers.Integral):
        return [check_count(count)] * n
    counts = [check_count(c) for c in sequence(count, "counts")]
    if len(counts) != n:
        raise ArgumentError(f"{n} start keys but {len(counts)} counts")
    return counts


def sequence(items: Any, what: str) -> Any:
    """``items`` if it is a sequence of items (not one str/bytes-like item, which would be
    iterated character by character)."""
    if isinstance(items, _SCALARS) or not hasattr(items, "__iter__"):
        raise ArgumentTypeError(f"{what} must be a sequence, not {type(items).__name__}")
    return items


def _listed(keys: Any) -> list:
    if isinstance(keys, np.ndarray) and keys.dtype.kind == "S":
        return keys.tolist()  # numpy 'S' items lose trailing NUL bytes
    return keys if isinstance(keys, list) else list(sequence(keys, "keys"))


def key_list(keys: Any, max_len: int) -> list[bytes]:
    """``keys`` as a list of checked ``bytes`` (the list itself when it already is one)."""
    if isinstance(keys, KeyBatch):
        keys.check()  # its arrays may have changed since it was made
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
        keys.check()
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
