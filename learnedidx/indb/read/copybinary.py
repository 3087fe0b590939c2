"""Numba decoder of PostgreSQL's binary COPY format for float8 scalars and float8[] arrays.

Queries cast every column to ``float8`` or ``float8[]`` in SQL, so one decoder serves every
numeric type.  Layout: 11-byte signature, int32 flags, int32 header-extension length; per
tuple an int16 field count (-1 ends the data), per field an int32 length (-1 = NULL) and
the value in network byte order.  An array value: int32 ndim, int32 has-nulls, int32
element type, (int32 size, int32 lower bound) per dimension, then int32 length + value per
element.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from learnedidx.errors import CopyFormatError

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


@njit(cache=True, nogil=True, inline="always")
def _i32(buf, p):
    v = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | np.int64(buf[p + 3])
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@njit(cache=True, nogil=True, inline="always")
def _f64(buf, p):
    u = np.uint64(0)
    for j in range(8):
        u = (u << np.uint64(8)) | np.uint64(buf[p + j])
    return np.array([u], np.uint64).view(np.float64)[0]


@njit(cache=True, nogil=True)
def _scan(buf, start, n_fields, array_field):
    """First pass: (rows, array width, error code).

    The width is that of the first usable row's array (no NULL anywhere, one dimension,
    no NULL elements), as on the Strider path; rows with other widths are not usable.
    """
    p = start
    rows = 0
    width = -1
    n = buf.shape[0]
    while p + 2 <= n:
        cnt = (np.int64(buf[p]) << 8) | np.int64(buf[p + 1])
        if cnt == 0xFFFF:
            return rows, width, 0
        if cnt != n_fields:
            return rows, width, 1
        p += 2
        usable = True
        row_width = -1
        for f in range(n_fields):
            if p + 4 > n:
                return rows, width, 2
            ln = _i32(buf, p)
            p += 4
            if ln < 0:
                usable = False
                continue
            if f == array_field:
                if _i32(buf, p) == 1 and _i32(buf, p + 4) == 0:
                    row_width = _i32(buf, p + 12)
                else:
                    usable = False
            p += ln
        if width < 0 and usable and row_width >= 0:
            width = row_width
        rows += 1
    return rows, width, 2


@njit(cache=True, nogil=True)
def _decode(buf, start, rows, n_fields, array_field, width, scal, arr, valid):
    p = start
    for r in range(rows):
        p += 2
        ok = True
        s = 0
        for f in range(n_fields):
            ln = _i32(buf, p)
            p += 4
            if ln < 0:
                ok = False
                if f != array_field:
                    s += 1
                continue
            if f == array_field:
                ndim = _i32(buf, p)
                if ndim != 1 or _i32(buf, p + 12) != width:
                    ok = False  # ragged or multi-dimensional arrays are not usable rows
                else:
                    q = p + 20
                    for j in range(width):
                        el = _i32(buf, q)
                        q += 4
                        if el < 0:
                            ok = False
                            arr[r, j] = np.nan
                        else:
                            arr[r, j] = _f64(buf, q)
                            q += 8
            else:
                scal[r, s] = _f64(buf, p)
                s += 1
            p += ln
        valid[r] = ok


def decode(data: bytes, n_fields: int, array_field: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scalars float64 rows×k, array float64 rows×width, valid bool rows) from a COPY BINARY stream.

    Rows with a NULL in any field (or in an array element) are marked invalid.
    """
    buf = np.frombuffer(data, np.uint8)
    if len(data) < 19 or data[:11] != SIGNATURE:
        raise CopyFormatError("not a binary COPY stream")
    ext = int.from_bytes(data[15:19], "big")
    start = 19 + ext
    rows, width, err = _scan(buf, start, n_fields, array_field)
    if err:
        raise CopyFormatError("malformed binary COPY stream" if err == 1 else "truncated binary COPY stream")
    width = max(width, 0)
    k = n_fields - (1 if array_field >= 0 else 0)
    scal = np.zeros((rows, k))
    arr = np.zeros((rows, width))
    valid = np.zeros(rows, np.bool_)
    _decode(buf, start, rows, n_fields, array_field, width, scal, arr, valid)
    return scal, arr, valid
