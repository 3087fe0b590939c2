"""Striders: decode heap pages, as the caller's backend streamed them, in Numba.

The backend (``extension/pages.c``) scans the relation with PostgreSQL's own heap scan in
the caller's snapshot: PostgreSQL decides which tuples the snapshot sees, and the backend
marks the line pointers of the others unused in its copy of each page.  So every ``LP_NORMAL``
tuple of a page that arrives here is a row the caller's ``SELECT`` returns, and nothing here
decides visibility.  A kernel walks the page layout (page header, line pointers, heap tuple
headers, null bitmaps, attribute alignment from the relation's layout, dropped columns
included), extracts the wanted fixed-width columns and uncompressed inline arrays, and writes
the usable rows (no NULL, no NULL element) straight into the training matrix.

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
T_INFOMASK2, T_INFOMASK, T_HOFF = 18, 20, 22
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

# Tuple decode status; and what decode_pages reports besides (DONE: every tuple decoded).
OK, UNUSABLE, UNDECODABLE, NOT_VECTOR = 0, 1, 2, 3
DONE, MALFORMED, RAGGED = 0, 4, 5

#: Bytes per array element, by type code INT2..BOOL.
ESIZE = np.array([2, 4, 8, 4, 8, 4, 1], np.int64)


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
_ld_u16 = unaligned_load(types.uint16)
_ld_u32 = unaligned_load(types.uint32)
_ld_i32 = unaligned_load(types.int32)


@njit(cache=True, nogil=True, inline="always")
def _u16(b, p):
    return np.int64(_ld_u16(b, np.int64(p)))


@njit(cache=True, nogil=True, inline="always")
def _u32(b, p):
    return np.int64(_ld_u32(b, np.int64(p)))


@njit(cache=True, nogil=True, inline="always")
def _i32(b, p):
    return np.int64(_ld_i32(b, np.int64(p)))


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
def _tuple(b, t, end, attlen, attalign, slot, code, has_missing, missing, scal):
    """Walk the attributes of the heap tuple at byte ``t`` (ending at ``end``): the wanted
    scalars into ``scal``; returns (status, byte position of the array's first element, its
    length, its element type code)."""
    infomask2 = _u16(b, t + T_INFOMASK2)
    infomask = _u16(b, t + T_INFOMASK)
    data = t + np.int64(b[t + T_HOFF])
    natts = infomask2 & HEAP_NATTS_MASK
    hasnull = (infomask & HEAP_HASNULL) != 0
    cur = np.int64(0)
    st = OK
    apos = np.int64(0)
    alen = np.int64(-1)
    acode = np.int64(0)
    for a in range(attlen.shape[0]):
        if a >= natts:  # stored before the column was added
            if slot[a] >= 0 and has_missing[a]:
                scal[slot[a]] = missing[a]
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
                return UNDECODABLE, apos, alen, acode
            if slot[a] >= 0:
                scal[slot[a]] = _read_value(b, pos, code[a])
        elif L == -1:
            if data + cur >= end:
                return UNDECODABLE, apos, alen, acode
            if b[data + cur] == 0:  # pad byte: a 4-byte header follows at alignment
                cur = _align(cur, np.int64(attalign[a]))
            pos = data + cur
            b0 = b[pos]
            if (b0 & 1) == 1:
                if b0 == 1:  # external TOAST pointer: header, tag, varatt_external
                    if slot[a] != SKIP or b[pos + 1] != VARTAG_ONDISK:
                        return UNDECODABLE, apos, alen, acode
                    vlen = np.int64(2 + SIZE_OF_VARATT_EXTERNAL)
                    hdr = 2
                else:
                    vlen = np.int64(b0 >> 1)
                    hdr = 1
            else:
                if (b0 & 3) == 2 and slot[a] != SKIP:  # compressed inline
                    return UNDECODABLE, apos, alen, acode
                vlen = _u32(b, pos) >> 2
                hdr = 4
            cur += vlen
            if pos + vlen > end or vlen < hdr:
                return UNDECODABLE, apos, alen, acode
            if slot[a] == ARRAY:
                v = pos + hdr - 4  # where a 4-byte-header array would start
                ndim = _i32(b, v + ARR_NDIM)
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
                    return UNDECODABLE, apos, alen, acode
                if _i32(b, v + ARR_DATAOFFSET) != 0:  # a NULL bitmap: NULL elements
                    st = max(st, UNUSABLE)
                elif ndim > 1:
                    st = max(st, NOT_VECTOR)
                else:
                    alen = _i32(b, v + ARR_DIM0) if ndim == 1 else 0
                    apos = v + ARR_DATA_1D
                    acode = ec
                    # the elements must lie inside the value (a corrupt page must not make the
                    # kernel read past it)
                    if ndim < 0 or alen < 0 or apos + alen * ESIZE[ec] > pos + vlen:
                        return UNDECODABLE, apos, alen, acode
        elif L == -2:  # cstring: skip to its terminator
            while data + cur < end and b[data + cur] != 0:
                cur += 1
            cur += 1
        else:
            return UNDECODABLE, apos, alen, acode
    return st, apos, alen, acode


@njit(cache=True, nogil=True)
def decode_pages(b, npages, attlen, attalign, slot, code, has_missing, missing, n_scalars, out, lead, width,
                 y, X, row0):
    """Decode the LP_NORMAL tuples of ``npages`` pages (bytes ``b``): each usable row (no NULL,
    no NULL element) goes to ``y[row0 + k]`` (output column 0, the label) and ``X[row0 + k]``:
    ``lead`` leading ones (the intercept's column), then the features (scalar slots, or the
    array column's ``width`` elements; ``width`` < 0: the first usable row's length).

    Returns (rows written, rows skipped, status, width, where, all ones, finite): status DONE,
    or at tuple ``where`` (page index * 65536 + line pointer number) UNDECODABLE, NOT_VECTOR,
    RAGGED (an array of another length than ``width``) or MALFORMED (a bad page header);
    ``all ones``: every row's first feature was 1.0; ``finite``: no NaN or infinity was written.
    """
    scal = np.zeros(max(n_scalars, 1))
    k = 0
    skipped = 0
    ones = True
    finite = True
    for pg in range(npages):
        base = pg * PAGE_SIZE
        items = _page_ok(b, base)
        if items < 0:
            return k, skipped, MALFORMED, width, pg * 65536, ones, finite
        for i in range(items):
            lp = _u32(b, base + SIZE_OF_PAGE_HEADER + ITEM_ID_SIZE * i)
            if ((lp >> 15) & 3) != LP_NORMAL:
                continue
            off = lp & 0x7FFF
            ln = lp >> 17
            where = pg * 65536 + i + 1
            if ln < SIZE_OF_HEAP_TUPLE_HEADER or off + ln > PAGE_SIZE:
                return k, skipped, UNDECODABLE, width, where, ones, finite
            st, apos, alen, acode = _tuple(b, base + off, base + off + ln, attlen, attalign, slot, code,
                                           has_missing, missing, scal)
            if st == UNUSABLE:
                skipped += 1
                continue
            if st != OK:
                return k, skipped, st, width, where, ones, finite
            if alen >= 0:
                if width < 0:
                    width = alen
                if alen != width:
                    return k, skipped, RAGGED, alen, where, ones, finite
            o = row0 + k
            v = scal[out[0]]
            y[o] = v
            finite &= np.isfinite(v)
            for c in range(lead):
                X[o, c] = 1.0
            col = lead
            for j in range(1, out.shape[0]):
                if out[j] >= 0:
                    v = scal[out[j]]
                    X[o, col] = v
                    finite &= np.isfinite(v)
                    col += 1
                elif acode == FLOAT8:
                    for e in range(width):
                        v = _ld_f64(b, apos + e * 8)
                        X[o, col + e] = v
                        finite &= np.isfinite(v)
                    col += width
                else:
                    step = ESIZE[acode]
                    for e in range(width):
                        v = _read_value(b, apos + e * step, acode)
                        X[o, col + e] = v
                        finite &= np.isfinite(v)
                    col += width
            if col > lead:
                ones &= X[o, lead] == 1.0
            k += 1
    return k, skipped, DONE, width, -1, ones, finite


@njit(cache=True, nogil=True)
def array_width(b, npages, attlen, attalign, slot, code, has_missing, missing, n_scalars):
    """The array column's length in the first usable row of the pages (-1: none is usable)."""
    scal = np.zeros(max(n_scalars, 1))
    for pg in range(npages):
        base = pg * PAGE_SIZE
        items = _page_ok(b, base)
        for i in range(max(items, 0)):
            lp = _u32(b, base + SIZE_OF_PAGE_HEADER + ITEM_ID_SIZE * i)
            off = lp & 0x7FFF
            ln = lp >> 17
            if ((lp >> 15) & 3) != LP_NORMAL or ln < SIZE_OF_HEAP_TUPLE_HEADER or off + ln > PAGE_SIZE:
                continue
            st, apos, alen, acode = _tuple(b, base + off, base + off + ln, attlen, attalign, slot, code,
                                           has_missing, missing, scal)
            if st == OK:
                return alen
    return -1


def features(layout: Layout, width: int) -> int:
    """Features per row: the scalar feature columns, plus the array's ``width`` elements."""
    return int((layout.out[1:] >= 0).sum()) + (width if layout.is_array else 0)


def decode(layout: Layout, blocks: np.ndarray, pages: np.ndarray, width: int, lead: int, y: np.ndarray,
           X: np.ndarray, row0: int) -> tuple[int, int, bool, bool]:
    """Decode a slot of pages into ``y[row0:]``, ``X[row0:]`` (``lead`` columns of ones, then the
    features; the array column's length must be ``width``): (rows written, rows skipped, every
    first feature was 1.0, every value finite).  Raises PagesUndecodableError for a value only
    the query path reads, TrainingDataError for arrays that are not feature vectors of one
    model, InDBError for a malformed page."""
    k, skipped, status, w, where, ones, finite = decode_pages(
        pages.reshape(-1), len(pages), layout.attlen, layout.attalign, layout.slot, layout.code, layout.has_missing,
        layout.missing, layout.n_scalars, layout.out, lead, width, y, X, row0)
    if status == DONE:
        return k, skipped, ones, finite
    page, lp = divmod(int(where), 65536)
    if status == MALFORMED:
        raise InDBError(f"block {int(blocks[page])} of {layout.relation} arrived malformed")
    if status == UNDECODABLE:
        raise PagesUndecodableError(f"a row of {layout.relation} holds a TOASTed or compressed value")
    row = f"row ({int(blocks[page])},{lp}) of {layout.relation}"
    if status == NOT_VECTOR:
        raise TrainingDataError(f'array column "{layout.array_name}" in {row} has more than one dimension')
    raise TrainingDataError(f'array column "{layout.array_name}" has {w} elements in {row} but {width} '
                            "in the first row: arrays of different lengths are not feature vectors of one model")


def first_width(layout: Layout, pages: np.ndarray) -> int:
    """The array column's length in the slot's first usable row (-1: none; 0: no array column)."""
    if not layout.is_array:
        return 0
    return int(array_width(pages.reshape(-1), len(pages), layout.attlen, layout.attalign, layout.slot, layout.code,
                           layout.has_missing, layout.missing, layout.n_scalars))


def warm_up() -> None:
    """Compile (or load from Numba's cache) the kernels for the types calls use."""
    pages = np.zeros((1, PAGE_SIZE), np.uint8)
    layout = Layout.from_stream({"name": "warm-up", "attrs": [[8, 8], [-1, 8]],
                                 "columns": [[1, FLOAT8OID, None, "y"], [2, 1022, None, "x"]]})
    first_width(layout, pages)
    decode(layout, np.zeros(1, ">u4"), pages, 0, 1, np.empty(0), np.empty((0, 1)), 0)
