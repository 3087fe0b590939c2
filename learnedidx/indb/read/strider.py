"""Striders: decode heap pages, as the caller's backend streamed them, in Numba.

The backend (``extension/learnedidx.c``) scans the relation with PostgreSQL's own heap scan in
the caller's snapshot: PostgreSQL decides which tuples the snapshot sees, and the backend
marks the line pointers of the others unused in its copy of each page.  So every ``LP_NORMAL``
tuple of a page that arrives here is a row the caller's ``SELECT`` returns, and nothing here
decides visibility.  A kernel walks the page layout (page header, line pointers, heap tuple
headers, null bitmaps, attribute alignment from the relation's layout, dropped columns
included) and extracts the wanted fixed-width columns and uncompressed inline arrays; a
second one writes the usable rows (no NULL, no NULL element) into the training matrix.

A visible tuple the Strider cannot decode (a TOAST pointer, a compressed value) raises
:class:`PagesUndecodableError`: the call then reads the query path instead.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, types

from learnedidx.errors import InDBError, PagesUndecodableError, ProtocolError, TrainingDataError
from learnedidx.native import unaligned_load

PAGE_SIZE = 8192
PAGE_LAYOUT_VERSION = 4

# Page header fields (src/include/storage/bufpage.h): byte offsets, and its size.
PD_LOWER, PD_UPPER, PD_SPECIAL, PD_PAGESIZE_VERSION = 12, 14, 16, 18
SIZE_OF_PAGE_HEADER = 24
# Line pointers (src/include/storage/itemid.h): 4 bytes, lp_off:15 | lp_flags:2 | lp_len:15.
ITEM_ID_SIZE = 4
LP_NORMAL = 1
# Heap tuple header fields (src/include/access/htup_details.h): byte offsets; the null
# bitmap t_bits starts at SIZE_OF_HEAP_TUPLE_HEADER.
T_XMAX, T_INFOMASK2, T_INFOMASK, T_HOFF = 4, 18, 20, 22
SIZE_OF_HEAP_TUPLE_HEADER = 23
HEAP_NATTS_MASK = 0x07FF
HEAP_HASNULL = 0x0001
# Array header (src/include/utils/array.h) after the 4-byte varlena header: byte offsets of
# ndim, dataoffset (0: no NULL bitmap), element type, the first dimension, and the data of
# a one-dimensional array (MAXALIGN(16 + 8 * ndim)).
ARR_NDIM, ARR_DATAOFFSET, ARR_ELEMTYPE, ARR_DIM0, ARR_DATA_1D = 4, 8, 12, 16, 24
# An external TOAST pointer on disk (src/include/varatt.h): tag VARTAG_ONDISK, 16 bytes of pointer.
VARTAG_ONDISK, SIZE_OF_VARATT_EXTERNAL = 18, 16
# Type oids (src/include/catalog/pg_type.dat).
BOOLOID, INT2OID, INT4OID, INT8OID, OIDOID, FLOAT4OID, FLOAT8OID = 16, 21, 23, 20, 26, 700, 701
ARRAY_OIDS = {1005: INT2OID, 1007: INT4OID, 1016: INT8OID, 1021: FLOAT4OID, 1022: FLOAT8OID}

# Scalar type codes understood by the kernels (also used for array elements).
INT2, INT4, INT8, FLOAT4, FLOAT8, OID, BOOL = range(7)
SCALAR_CODES = {INT2OID: INT2, INT4OID: INT4, INT8OID: INT8, FLOAT4OID: FLOAT4, FLOAT8OID: FLOAT8, OIDOID: OID,
                BOOLOID: BOOL}

# Attribute slots in the layout spec.
SKIP, ARRAY = -1, -2

# Tuple decode status.
OK, UNUSABLE, UNDECODABLE, NOT_VECTOR = 0, 1, 2, 3


@dataclass
class Layout:
    """How to read one relation's tuples: one entry per attnum 1..(last wanted column)."""

    relation: str
    attlen: np.ndarray  # int16
    attalign: np.ndarray  # int8 (1, 2, 4, 8)
    slot: np.ndarray  # int32: SKIP, ARRAY, or the scalar slot
    code: np.ndarray  # int8 scalar type code
    has_missing: np.ndarray  # bool: rows stored before the column was added read `missing`
    missing: np.ndarray  # float64
    n_scalars: int
    out: np.ndarray  # int32 per output column (label first): its scalar slot, or ARRAY
    array_name: str | None

    @property
    def is_array(self) -> bool:
        return self.array_name is not None

    @classmethod
    def from_stream(cls, rel: dict) -> "Layout":
        """The layout the backend sent: ``attrs`` [[attlen, align], ...] for attnums 1..last and
        ``columns`` [[attnum, type oid, missing value or None, name], ...], label first."""
        try:
            attrs, columns = rel["attrs"], rel["columns"]
            n = len(attrs)
            ok = all(len(a) == 2 and (a[0] in (-1, -2) or 0 < a[0] <= PAGE_SIZE) and a[1] in (1, 2, 4, 8)
                     for a in attrs) and len(columns) >= 1 and all(
                len(c) == 4 and 1 <= c[0] <= n and (c[1] in SCALAR_CODES or c[1] in ARRAY_OIDS) for c in columns)
        except (KeyError, TypeError):
            ok = False
        if not ok:  # never from PostgreSQL: a corrupt or forged stream
            raise ProtocolError(f"a malformed relation layout in the data stream: {str(rel)[:200]}")
        slot = np.full(n, SKIP, np.int32)
        code = np.zeros(n, np.int8)
        has_missing = np.zeros(n, np.bool_)
        missing = np.zeros(n)
        out = np.zeros(len(rel["columns"]), np.int32)
        slots: dict[int, int] = {}
        array_name = None
        for j, (attnum, typid, miss, name) in enumerate(rel["columns"]):
            a = attnum - 1
            if typid in ARRAY_OIDS:
                slot[a] = out[j] = ARRAY
                array_name = name
                continue
            if a not in slots:  # a column may be both the label and a feature: one slot
                slots[a] = len(slots)
                slot[a], code[a] = slots[a], SCALAR_CODES[typid]
                has_missing[a] = miss is not None
                missing[a] = np.nan if miss is None else float(miss)
            out[j] = slots[a]
        return cls(rel["name"], np.array([x[0] for x in attrs], np.int16), np.array([x[1] for x in attrs], np.int8),
                   slot, code, has_missing, missing, len(slots), out, array_name)


# ------------------------------------------------------------------------------ kernels
@njit(cache=True, nogil=True, inline="always")
def _u16(b, p):
    return np.int64(b[p]) | (np.int64(b[p + 1]) << 8)


@njit(cache=True, nogil=True, inline="always")
def _u32(b, p):
    return np.int64(b[p]) | (np.int64(b[p + 1]) << 8) | (np.int64(b[p + 2]) << 16) | (np.int64(b[p + 3]) << 24)


@njit(cache=True, nogil=True, inline="always")
def _i32(b, p):
    v = _u32(b, p)
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@njit(cache=True, nogil=True, inline="always")
def _align(off, a):
    return (off + a - 1) & ~(a - 1)


_ld_f64 = unaligned_load(types.float64)
_ld_f32 = unaligned_load(types.float32)
_ld_i64 = unaligned_load(types.int64)


@njit(cache=True, nogil=True, inline="always")
def _read_value(b, p, code):
    """A little-endian scalar of type ``code`` at byte ``p``, as float64."""
    if code == FLOAT8:
        return _ld_f64(b, np.int64(p))
    if code == FLOAT4:
        return np.float64(_ld_f32(b, np.int64(p)))
    if code == INT8:
        return np.float64(_ld_i64(b, np.int64(p)))
    if code == INT4:
        return np.float64(_i32(b, p))
    if code == INT2:
        v = _u16(b, p)
        return np.float64(v - 65536 if v >= 32768 else v)
    if code == BOOL:
        return np.float64(b[p] != 0)
    return np.float64(_u32(b, p))  # oid


@njit(cache=True, nogil=True)
def _page_ok(b, base):
    """Number of line pointers on the page at ``base``; 0 for a new page, -1 when malformed."""
    lower = _u16(b, base + PD_LOWER)
    upper = _u16(b, base + PD_UPPER)
    special = _u16(b, base + PD_SPECIAL)
    version = _u16(b, base + PD_PAGESIZE_VERSION)
    if upper == 0:  # a new, never-initialised page: no tuples
        return 0
    if (version & 0xFF) != PAGE_LAYOUT_VERSION or (version & 0xFF00) != PAGE_SIZE \
            or lower < SIZE_OF_PAGE_HEADER or lower > upper or upper > special or special > PAGE_SIZE:
        return -1
    return (lower - SIZE_OF_PAGE_HEADER) // ITEM_ID_SIZE


@njit(cache=True, nogil=True)
def count_tuples(pages):
    """Number of LP_NORMAL line pointers, or -1 - page index of the first malformed page."""
    b = pages.reshape(-1)
    n = 0
    for pg in range(pages.shape[0]):
        base = pg * PAGE_SIZE
        items = _page_ok(b, base)
        if items < 0:
            return -1 - pg
        for i in range(items):
            lp = _u32(b, base + SIZE_OF_PAGE_HEADER + ITEM_ID_SIZE * i)
            if ((lp >> 15) & 3) == LP_NORMAL:
                n += 1
    return n


@njit(cache=True, nogil=True)
def extract(pages, attlen, attalign, slot, code, has_missing, missing, n_scalars, n_tuples):
    """Decode every LP_NORMAL tuple of ``pages`` (rows × PAGE_SIZE uint8).

    Returns per tuple: page index, line pointer number, status (OK, UNUSABLE for NULLs and
    NULL elements, NOT_VECTOR for a multi-dimensional array, UNDECODABLE), scalar values, and
    for an array column the byte position of its first element, its length and element type.
    """
    b = pages.reshape(-1)
    page = np.empty(n_tuples, np.int32)
    lpn = np.empty(n_tuples, np.int32)
    status = np.zeros(n_tuples, np.int8)
    scal = np.zeros((n_tuples, n_scalars))
    apos = np.zeros(n_tuples, np.int64)
    alen = np.full(n_tuples, -1, np.int32)
    acode = np.zeros(n_tuples, np.int8)
    natt_want = attlen.shape[0]
    k = 0
    for pg in range(pages.shape[0]):
        base = pg * PAGE_SIZE
        items = _page_ok(b, base)
        for i in range(items):
            lp = _u32(b, base + SIZE_OF_PAGE_HEADER + ITEM_ID_SIZE * i)
            if ((lp >> 15) & 3) != LP_NORMAL:
                continue
            off = lp & 0x7FFF
            ln = lp >> 17
            page[k] = pg
            lpn[k] = i + 1
            if ln < SIZE_OF_HEAP_TUPLE_HEADER or off + ln > PAGE_SIZE:
                status[k] = UNDECODABLE
                k += 1
                continue
            t = base + off
            end = t + ln
            infomask2 = _u16(b, t + T_INFOMASK2)
            infomask = _u16(b, t + T_INFOMASK)
            hoff = np.int64(b[t + T_HOFF])
            natts = infomask2 & HEAP_NATTS_MASK
            hasnull = (infomask & HEAP_HASNULL) != 0
            data = t + hoff
            cur = np.int64(0)
            st = OK
            for a in range(natt_want):
                if a >= natts:  # stored before the column was added
                    if slot[a] >= 0 and has_missing[a]:
                        scal[k, slot[a]] = missing[a]
                    elif slot[a] != SKIP:
                        st = max(st, UNUSABLE)
                    continue
                if hasnull and ((b[t + SIZE_OF_HEAP_TUPLE_HEADER + (a >> 3)] >> (a & 7)) & 1) == 0:
                    if slot[a] != SKIP:
                        st = max(st, UNUSABLE)
                    continue
                L = np.int64(attlen[a])
                if L > 0:
                    cur = _align(cur, np.int64(attalign[a]))
                    pos = data + cur
                    cur += L
                    if pos + L > end:
                        st = UNDECODABLE
                        break
                    if slot[a] >= 0:
                        scal[k, slot[a]] = _read_value(b, pos, code[a])
                elif L == -1:
                    if data + cur >= end:
                        st = UNDECODABLE
                        break
                    if b[data + cur] == 0:  # pad byte: a 4-byte header follows at alignment
                        cur = _align(cur, np.int64(attalign[a]))
                    pos = data + cur
                    b0 = b[pos]
                    if (b0 & 1) == 1:
                        if b0 == 1:  # external TOAST pointer: header, tag, varatt_external
                            if slot[a] != SKIP or b[pos + 1] != VARTAG_ONDISK:
                                st = UNDECODABLE
                                break
                            vlen = np.int64(2 + SIZE_OF_VARATT_EXTERNAL)
                            hdr = 2
                        else:
                            vlen = np.int64(b0 >> 1)
                            hdr = 1
                    else:
                        if (b0 & 3) == 2:  # compressed inline
                            if slot[a] != SKIP:
                                st = UNDECODABLE
                                break
                        vlen = _u32(b, pos) >> 2
                        hdr = 4
                    cur += vlen
                    if pos + vlen > end or vlen < hdr:
                        st = UNDECODABLE
                        break
                    if slot[a] == ARRAY:
                        v = pos + hdr - 4  # where a 4-byte-header array would start
                        ndim = _i32(b, v + ARR_NDIM)
                        dataoffset = _i32(b, v + ARR_DATAOFFSET)
                        elem = _u32(b, v + ARR_ELEMTYPE)
                        ec = -1
                        if elem == FLOAT8OID:
                            ec = FLOAT8
                        elif elem == FLOAT4OID:
                            ec = FLOAT4
                        elif elem == INT8OID:
                            ec = INT8
                        elif elem == INT4OID:
                            ec = INT4
                        elif elem == INT2OID:
                            ec = INT2
                        if ec < 0:
                            st = UNDECODABLE
                            break
                        if dataoffset != 0:  # a NULL bitmap: NULL elements
                            st = max(st, UNUSABLE)
                        elif ndim > 1:
                            st = max(st, NOT_VECTOR)
                        else:
                            alen[k] = _i32(b, v + ARR_DIM0) if ndim == 1 else 0
                            apos[k] = v + ARR_DATA_1D
                            acode[k] = ec
                            # the elements must lie inside the value (a corrupt page must not
                            # make fill_rows read past it)
                            esize = 8 if ec == FLOAT8 or ec == INT8 else (2 if ec == INT2 else 4)
                            if ndim < 0 or alen[k] < 0 or apos[k] + np.int64(alen[k]) * esize > pos + vlen:
                                st = UNDECODABLE
                                break
                elif L == -2:  # cstring: skip to its terminator
                    while data + cur < end and b[data + cur] != 0:
                        cur += 1
                    cur += 1
                else:
                    st = UNDECODABLE
                    break
            status[k] = st
            k += 1
    return page[:k], lpn[:k], status[:k], scal[:k], apos[:k], alen[:k], acode[:k]


@njit(cache=True, nogil=True)
def fill_rows(pages, rows, scal, out, apos, acode, width, y, X, row0):
    """Write tuples ``rows`` into ``y[row0:]`` (output column 0, the label) and
    ``X[row0:, 1:]`` (the features: scalar slots or the array's ``width`` elements)."""
    b = pages.reshape(-1)
    esize = np.array([2, 4, 8, 4, 8, 4, 1], np.int64)  # bytes per element, by type code INT2..BOOL
    for r in range(rows.shape[0]):
        t = rows[r]
        o = row0 + r
        y[o] = scal[t, out[0]]
        col = 1
        for j in range(1, out.shape[0]):
            if out[j] >= 0:
                X[o, col] = scal[t, out[j]]
                col += 1
            else:
                c = acode[t]
                p = apos[t]
                if c == FLOAT8:
                    for e in range(width):
                        X[o, col + e] = _ld_f64(b, p + e * 8)
                else:
                    step = esize[c]
                    for e in range(width):
                        X[o, col + e] = _read_value(b, p + e * step, c)
                col += width


def decode(layout: Layout, blocks: np.ndarray, pages: np.ndarray, width: int):
    """(tuple numbers of the usable rows, array width, skipped rows) of a frame of pages; the
    array width is ``width`` when known (>= 0), else that of the first usable row."""
    n = count_tuples(pages)
    if n < 0:
        raise InDBError(f"block {int(blocks[-1 - n])} of {layout.relation} arrived malformed")
    page, lpn, status, scal, apos, alen, acode = extract(
        pages, layout.attlen, layout.attalign, layout.slot, layout.code, layout.has_missing, layout.missing,
        layout.n_scalars, n)
    if (status == UNDECODABLE).any():
        raise PagesUndecodableError(f"a row of {layout.relation} holds a TOASTed or compressed value")
    ok = np.flatnonzero(status == OK)
    bad = np.flatnonzero(status == NOT_VECTOR)
    if layout.is_array:
        if width < 0 and len(ok):
            width = int(alen[ok[0]])
        ragged = ok[alen[ok] != width]
        if len(bad) or len(ragged):
            t = min(np.r_[bad, ragged])
            where = f"row ({int(blocks[page[t]])},{int(lpn[t])}) of {layout.relation}"
            raise TrainingDataError(
                f'array column "{layout.array_name}" in {where} has more than one dimension' if status[t] == NOT_VECTOR
                else f'array column "{layout.array_name}" has {int(alen[t])} elements in {where} but {width} '
                     "in the first row: arrays of different lengths are not feature vectors of one model")
    return ok, width, len(status) - len(ok), (scal, apos, acode)


def warm_up() -> None:
    """Compile (or load from Numba's cache) the kernels for the types calls use."""
    pages = np.zeros((1, PAGE_SIZE), np.uint8)
    layout = Layout.from_stream({"name": "warm-up", "attrs": [[8, 8], [-1, 8]],
                                 "columns": [[1, FLOAT8OID, None, "y"], [2, 1022, None, "x"]]})
    ok, width, _, (scal, apos, acode) = decode(layout, np.zeros(1, ">u4"), pages, -1)
    fill_rows(pages, ok, scal, layout.out, apos, acode, 0, np.empty(0), np.empty((0, 1)), 0)
