"""Striders: read a table's heap pages through the buffer manager and decode them in Numba.

Pages come from ``get_raw_page`` (contrib ``pageinspect``) over several connections in
parallel, each on a contiguous block range.  A Numba kernel walks the page layout (page
header, line pointers, heap tuple headers, null bitmaps, attribute alignment taken from
``pg_attribute``, dropped columns included) and extracts the wanted fixed-width columns and
uncompressed inline arrays.  Raw pages hold every tuple version, so visibility is decided
here against the imported snapshot:

* hint bits and the snapshot's ``xmin``/``xmax``/``xip`` settle most tuples;
* transaction ids older than the snapshot's ``xmin`` without hint bits are resolved in one
  batched ``pg_xact_status`` query;
* anything left ambiguous (ids inside the snapshot's window that are not listed as running,
  which may be subtransactions; multixact updaters; too-old ids) is settled by PostgreSQL
  itself with a TID scan of exactly those tuple versions under the same snapshot.

What the Strider does not decode (TOASTed or compressed values, ``numeric``, row-level
security, views, columns with ``atthasmissing``) is reported by :func:`ineligible_reason`
so that the caller takes the COPY path; a visible tuple it cannot decode also sends the
caller to the COPY path (:class:`StriderFallback`).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import psycopg
from numba import njit, types
from psycopg import sql

from learnedidx.errors import StriderFallback
from learnedidx.indb.read.access import RelationInfo
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
# Array header (src/include/utils/array.h) after the 4-byte varlena header: byte offsets of
# ndim, dataoffset (0: no NULL bitmap), element type, the first dimension, and the data of
# a one-dimensional array (MAXALIGN(16 + 8 * ndim)).
ARR_NDIM, ARR_DATAOFFSET, ARR_ELEMTYPE, ARR_DIM0, ARR_DATA_1D = 4, 8, 12, 16, 24
# Element type oids (src/include/catalog/pg_type.dat).
INT2OID, INT4OID, INT8OID, FLOAT4OID, FLOAT8OID = 21, 23, 20, 700, 701

# Scalar type codes understood by the kernel (also used for array elements).
INT2, INT4, INT8, FLOAT4, FLOAT8, OID = range(6)
SCALAR_CODES = {"int2": INT2, "int4": INT4, "int8": INT8, "float4": FLOAT4, "float8": FLOAT8, "oid": OID}
ARRAY_TYPES = {"_int2", "_int4", "_int8", "_float4", "_float8"}

# Attribute slots in the layout spec.
SKIP, ARRAY = -1, -2

# Tuple decode status.
OK, UNUSABLE, UNDECODABLE = 0, 1, 2

# t_infomask bits (src/include/access/htup_details.h).
HEAP_HASNULL = 0x0001
HEAP_XMAX_KEYSHR_LOCK = 0x0010
HEAP_XMAX_EXCL_LOCK = 0x0040
HEAP_XMAX_LOCK_ONLY = 0x0080
HEAP_LOCK_MASK = HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK  # shared = exclusive | key-share
HEAP_XMIN_COMMITTED = 0x0100
HEAP_XMIN_INVALID = 0x0200
HEAP_XMIN_FROZEN = 0x0300
HEAP_XMAX_COMMITTED = 0x0400
HEAP_XMAX_INVALID = 0x0800
HEAP_XMAX_IS_MULTI = 0x1000
HEAP_MOVED = 0xC000
FIRST_NORMAL_XID = 3


@dataclass
class Layout:
    """Where the wanted columns sit in the tuple: one entry per attnum 1..max wanted."""

    attlen: np.ndarray  # int16
    attalign: np.ndarray  # int8 (1, 2, 4, 8)
    slot: np.ndarray  # int32: SKIP, ARRAY, or the scalar output slot
    code: np.ndarray  # int8 scalar type code
    n_scalars: int


@dataclass
class Snapshot:
    """An MVCC snapshot as ``pg_current_snapshot()`` reports it (full 64-bit ids)."""

    xmin: int
    xmax: int
    xip: np.ndarray  # int64, sorted


@dataclass
class StriderResult:
    scal: np.ndarray  # float64 (rows, n_scalars), visible tuples in physical order
    arr: np.ndarray  # float64 (rows, width)
    valid: np.ndarray  # bool (rows,)
    pages: int
    tuples_seen: int
    fetch_seconds: float
    decode_seconds: float
    ambiguous: int  # tuples whose visibility PostgreSQL settled


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
def extract(pages, first_block, attlen, attalign, slot, code, n_scalars, n_tuples):
    """Decode every LP_NORMAL tuple of ``pages`` (rows × PAGE_SIZE uint8).

    Returns per tuple: block, line pointer number, xmin, xmax, infomask, status (OK,
    UNUSABLE for NULLs and unusable arrays, UNDECODABLE), scalar values, and for an array
    column the byte position of its first element, its length and element type code.
    """
    b = pages.reshape(-1)
    blk = np.empty(n_tuples, np.int64)
    lpn = np.empty(n_tuples, np.int32)
    xmin = np.empty(n_tuples, np.int64)
    xmax = np.empty(n_tuples, np.int64)
    mask = np.empty(n_tuples, np.int32)
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
            blk[k] = first_block + pg
            lpn[k] = i + 1
            if ln < SIZE_OF_HEAP_TUPLE_HEADER or off + ln > PAGE_SIZE:
                status[k] = UNDECODABLE
                xmin[k] = 0
                xmax[k] = 0
                mask[k] = 0
                k += 1
                continue
            t = base + off
            end = t + ln
            xmin[k] = _u32(b, t)
            xmax[k] = _u32(b, t + T_XMAX)
            infomask2 = _u16(b, t + T_INFOMASK2)
            infomask = _u16(b, t + T_INFOMASK)
            mask[k] = infomask
            hoff = np.int64(b[t + T_HOFF])
            natts = infomask2 & HEAP_NATTS_MASK
            hasnull = (infomask & HEAP_HASNULL) != 0
            data = t + hoff
            cur = np.int64(0)
            st = OK
            for a in range(natt_want):
                if a >= natts or (hasnull and ((b[t + SIZE_OF_HEAP_TUPLE_HEADER + (a >> 3)] >> (a & 7)) & 1) == 0):
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
                        if b0 == 1:  # external TOAST pointer
                            st = UNDECODABLE
                            break
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
                        if ndim != 1 or dataoffset != 0:  # not a vector, or has NULL elements
                            st = max(st, UNUSABLE)
                        else:
                            n = _i32(b, v + ARR_DIM0)
                            apos[k] = v + ARR_DATA_1D
                            alen[k] = n
                            acode[k] = ec
                elif L == -2:  # cstring: skip to its terminator
                    while data + cur < end and b[data + cur] != 0:
                        cur += 1
                    cur += 1
                else:
                    st = UNDECODABLE
                    break
            status[k] = st
            k += 1
    return blk[:k], lpn[:k], xmin[:k], xmax[:k], mask[:k], status[:k], scal[:k], apos[:k], alen[:k], acode[:k]


@njit(cache=True, nogil=True)
def gather_arrays(pages, rows, dest, apos, acode, width, out):
    """Copy the array elements of tuples ``rows`` (each of length ``width``) into ``out[dest]``."""
    b = pages.reshape(-1)
    esize = np.array([2, 4, 8, 4, 8, 4], np.int64)  # bytes per element, by type code INT2..OID
    for r in range(rows.shape[0]):
        t = rows[r]
        c = acode[t]
        p = apos[t]
        step = esize[c]
        o = dest[r]
        if c == FLOAT8:
            for j in range(width):
                out[o, j] = _ld_f64(b, p + j * 8)
        else:
            for j in range(width):
                out[o, j] = _read_value(b, p + j * step, c)


# ----------------------------------------------------------------------- visibility
def full_xids(xid32: np.ndarray, snap: Snapshot) -> np.ndarray:
    """Widen 32-bit ids to 64-bit ids around the snapshot's xmax (ids < 3 stay special).

    Ids on the pages lie within 2^31 of the current id, before the snapshot or after it
    (rows written since), so the signed 32-bit distance to xmax places them exactly.
    """
    x = xid32.astype(np.int64)
    diff = ((x - (snap.xmax & 0xFFFFFFFF) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    return np.where(x < FIRST_NORMAL_XID, x, snap.xmax + diff)


def _running(full: np.ndarray, snap: Snapshot) -> np.ndarray:
    """Ids the snapshot sees as in progress or not yet started."""
    return (full >= snap.xmax) | np.isin(full, snap.xip)


def visibility(xmin32: np.ndarray, xmax32: np.ndarray, mask: np.ndarray, snap: Snapshot,
               xact_status) -> tuple[np.ndarray, np.ndarray]:
    """(visible, ambiguous) masks of tuples under ``snap`` (HeapTupleSatisfiesMVCC, conservative).

    ``xact_status(ids)`` returns, for 64-bit ids older than the snapshot's xmin, 1 when
    committed, 0 when aborted and -1 when unknown.
    """
    n = len(mask)
    m = mask.astype(np.int64)
    xmin = full_xids(xmin32, snap)
    xmax = full_xids(xmax32, snap)
    vis = np.zeros(n, bool)
    amb = (m & HEAP_MOVED) != 0

    # --- inserter
    frozen = ((m & HEAP_XMIN_FROZEN) == HEAP_XMIN_FROZEN) | (xmin < FIRST_NORMAL_XID)
    aborted = ((m & HEAP_XMIN_FROZEN) == HEAP_XMIN_INVALID)
    old = xmin < snap.xmin
    in_window = ~frozen & ~aborted & ~old & ~_running(xmin, snap)
    amb |= in_window
    hinted = (m & HEAP_XMIN_COMMITTED) != 0
    need = ~amb & ~frozen & ~aborted & old & ~hinted
    committed_min = frozen | (~aborted & old & hinted)
    if need.any():
        st = _status_of(xmin[need], xact_status)
        committed_min[np.flatnonzero(need)[st == 1]] = True
        amb[np.flatnonzero(need)[st < 0]] = True
    inserted = committed_min & ~amb

    # --- deleter (only for tuples whose insert is visible)
    xmax_invalid = ((m & HEAP_XMAX_INVALID) != 0) | (xmax32 == 0)
    multi = (m & HEAP_XMAX_IS_MULTI) != 0
    lock_only = ((m & HEAP_XMAX_LOCK_ONLY) != 0) | ((m & (HEAP_XMAX_IS_MULTI | HEAP_LOCK_MASK)) == HEAP_XMAX_EXCL_LOCK)
    alive = inserted & (xmax_invalid | lock_only)
    rest = inserted & ~alive
    amb |= rest & multi
    rest &= ~multi
    alive |= rest & _running(xmax, snap)
    rest &= ~_running(xmax, snap)
    amb |= rest & (xmax >= snap.xmin)
    rest &= xmax < snap.xmin
    # committed deleter hinted: gone; otherwise ask the commit log
    need = rest & ((m & HEAP_XMAX_COMMITTED) == 0)
    if need.any():
        st = _status_of(xmax[need], xact_status)
        idx = np.flatnonzero(need)
        alive[idx[st == 0]] = True
        amb[idx[st < 0]] = True
    vis = alive & ~amb
    return vis, amb


def _status_of(ids: np.ndarray, xact_status) -> np.ndarray:
    # Tuples written together sit together: drop repeats in runs before sorting.
    runs = ids[np.r_[True, ids[1:] != ids[:-1]]]
    uniq = np.unique(runs)
    return np.asarray(xact_status(uniq), np.int8)[np.searchsorted(uniq, ids)]


# ----------------------------------------------------------------------- the reader
def ineligible_reason(conn: psycopg.Connection, rel: RelationInfo, columns: list[str]) -> str | None:
    """Why the Strider cannot read ``columns`` of ``rel`` (None when it can)."""
    if rel.relkind not in ("r", "m"):
        return "the source is not a plain table"
    if rel.rls:
        return "row-level security applies to the caller"
    if not conn.execute("SELECT has_table_privilege(%s, 'SELECT')", (rel.oid,)).fetchone()[0]:
        return "the caller holds column privileges only (the Strider locks the whole table)"
    for c in columns:
        t = rel.types[c]
        if t not in SCALAR_CODES and t not in ARRAY_TYPES:
            return f'column "{c}" has type {t}'
    missing = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attname = ANY(%s) AND atthasmissing",
        (rel.oid, columns)).fetchall()
    if missing:
        return f'column "{missing[0][0]}" was added with a default that old rows do not store'
    if _raw_page_function(conn) is None:
        return "the pageinspect extension is not installed"
    return None


def _raw_page_function(conn: psycopg.Connection) -> sql.Composable | None:
    row = conn.execute("SELECT n.nspname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                       "WHERE p.proname = 'get_raw_page' AND p.pronargs = 3 LIMIT 1").fetchone()
    return None if row is None else sql.Identifier(row[0], "get_raw_page")


def layout(conn: psycopg.Connection, rel: RelationInfo, scalars: list[str], array: str | None) -> Layout:
    """Layout spec over attnums 1..(last wanted column), dropped columns included."""
    rows = conn.execute(
        "SELECT attnum, attname, attlen, attalign, attisdropped FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 ORDER BY attnum", (rel.oid,)).fetchall()
    wanted = set(scalars) | ({array} if array else set())
    last = max(r[0] for r in rows if r[1] in wanted and not r[4])
    rows = rows[:last]
    align = {"c": 1, "s": 2, "i": 4, "d": 8}
    slot = np.full(last, SKIP, np.int32)
    code = np.zeros(last, np.int8)
    for i, (_, name, _, _, dropped) in enumerate(rows):
        if dropped:
            continue
        if name == array:
            slot[i] = ARRAY
        elif name in scalars:
            # a column may be both the label and a feature: the first occurrence gets the slot
            slot[i] = scalars.index(name)
            code[i] = SCALAR_CODES[rel.types[name]]
    layout_ = Layout(np.array([r[2] for r in rows], np.int16), np.array([align[r[3]] for r in rows], np.int8),
                     slot, code, len(scalars))
    return layout_


def snapshot_of(conn: psycopg.Connection) -> Snapshot:
    xmin, xmax, xip = conn.execute(
        "SELECT pg_snapshot_xmin(s)::text::int8, pg_snapshot_xmax(s)::text::int8, "
        "ARRAY(SELECT x::text::int8 FROM pg_snapshot_xip(s) x ORDER BY 1) FROM pg_current_snapshot() s").fetchone()
    return Snapshot(xmin, xmax, np.array(sorted(xip), np.int64))


_COPY_HEADER = 19  # signature, flags, header extension length
GROUP_PAGES = 256  #: pages per COPY row (one 2 MiB bytea): few messages, little per-message overhead


def _fetch(conninfo: str, fn: sql.Composable, relname: str, lo: int, hi: int) -> np.ndarray:
    """Blocks lo..hi-1 as a (pages, PAGE_SIZE) uint8 array, read on a connection of its own.

    One COPY BINARY statement returns the pages in rows of :data:`GROUP_PAGES` pages each
    (``string_agg`` of ``get_raw_page``), streamed straight into the preallocated result.
    Both ``generate_series`` scans feed their consumers in order, so no ``ORDER BY`` (which
    would sort megabytes of bytea) is needed."""
    pages = np.empty((hi - lo, PAGE_SIZE), np.uint8)
    query = sql.SQL(
        "COPY (SELECT (SELECT string_agg({fn}({rel}, 'main', b), ''::bytea) "
        "FROM generate_series(g, least(g + {k} - 1, {last})) b) FROM generate_series({lo}::int8, {last}, {k}) g) "
        "TO STDOUT (FORMAT BINARY)").format(
        fn=fn, rel=sql.Literal(relname), k=sql.Literal(GROUP_PAGES), lo=sql.Literal(lo), last=sql.Literal(hi - 1))
    with psycopg.connect(conninfo, autocommit=True) as c:
        with c.cursor().copy(query) as copy:
            end = _copy_into(copy, pages.reshape(-1))
    if end != pages.size:
        raise StriderFallback(f"get_raw_page did not return one {PAGE_SIZE}-byte page per block")
    return pages


def _copy_into(chunks, out: np.ndarray) -> int:
    """Write the single bytea field of each COPY BINARY row, back to back, into ``out``;
    chunks may split rows anywhere.  Returns the number of bytes written."""
    head = bytearray()  # header bytes collected so far (file header, then each row's)
    want = _COPY_HEADER + 6
    left = 0  # bytes of the current field still to copy
    off = 0
    for chunk in chunks:
        mv = memoryview(chunk)
        i = 0
        while i < len(mv):
            if left:
                take = min(left, len(mv) - i)
                if off + take > out.size:
                    raise StriderFallback("get_raw_page returned more data than the table's size")
                out[off:off + take] = np.frombuffer(mv[i:i + take], np.uint8)
                off, i, left = off + take, i + take, left - take
                continue
            take = min(want - len(head), len(mv) - i)
            head += mv[i:i + take]
            i += take
            if head[-2:] == b"\xff\xff" and len(head) == want - 4:  # trailer: no more rows
                head.clear()
                break
            if len(head) == want:
                nfields, left = int.from_bytes(head[-6:-4], "big"), int.from_bytes(head[-4:], "big")
                if nfields != 1 or left % PAGE_SIZE:
                    raise StriderFallback("unexpected COPY row from get_raw_page")
                head.clear()
                want = 6
    return off


def read(conn: psycopg.Connection, conninfo: str, rel: RelationInfo, scalars: list[str], array: str | None,
         *, connections: int = 2) -> StriderResult:
    """Read ``scalars`` and ``array`` of the visible tuples of ``rel`` under ``conn``'s snapshot.

    ``conn`` is the caller's snapshot session (running as the caller); page reads use
    ``connections`` further connections from ``conninfo`` as the server's own role.
    """
    t0 = time.perf_counter()
    # Hold the table against rewrites while its pages are read elsewhere.
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(rel.ident))
    snap = snapshot_of(conn)
    spec = layout(conn, rel, scalars, array)
    nblocks = conn.execute("SELECT pg_relation_size(%s) / %s", (rel.oid, PAGE_SIZE)).fetchone()[0]
    fn = _raw_page_function(conn)
    relname = rel.ident.as_string(conn)
    connections = max(1, min(connections, nblocks or 1))
    bounds = np.linspace(0, nblocks, connections + 1).astype(int)

    def chunk(i: int):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if hi <= lo:
            return None
        ta = time.perf_counter()
        pages = _fetch(conninfo, fn, relname, lo, hi)
        tb = time.perf_counter()
        n = count_tuples(pages)
        if n < 0:
            raise StriderFallback(f"block {lo - 1 - n} does not have the expected page layout")
        out = extract(pages, lo, spec.attlen, spec.attalign, spec.slot, spec.code, spec.n_scalars, n)
        return pages, out, tb - ta, time.perf_counter() - tb

    try:
        with ThreadPoolExecutor(connections) as pool:
            parts = [p for p in pool.map(chunk, range(connections)) if p is not None]
    except psycopg.errors.InsufficientPrivilege as exc:
        raise StriderFallback(f"the accelerator server's own database role cannot read raw pages: {exc}") from None
    fetch_s = max((p[2] for p in parts), default=0.0)
    decode_s = max((p[3] for p in parts), default=0.0)
    cols = list(zip(*(p[1] for p in parts))) if parts else None
    if cols is None:
        return StriderResult(np.zeros((0, spec.n_scalars)), np.zeros((0, 0)), np.zeros(0, bool), 0, 0,
                             fetch_s, decode_s, 0)
    blk, lpn, xmin, xmax, mask, status, scal, apos, alen, acode = (np.concatenate(c) for c in cols)

    vis, amb = visibility(xmin, xmax, mask, snap, lambda ids: _xact_status(conn, ids))
    if amb.any():
        vis[np.flatnonzero(amb)[_visible_tids(conn, rel, blk[amb], lpn[amb])]] = True
    if (status[vis] == UNDECODABLE).any():
        raise StriderFallback("a visible tuple holds a value the Strider does not decode (TOAST or compression)")
    sel = np.flatnonzero(vis)
    valid = status[sel] == OK
    width = 0
    if array is not None:
        usable = sel[valid]
        width = int(alen[usable[0]]) if len(usable) else 0
        valid &= alen[sel] == width  # ragged arrays are not usable rows, as on the COPY path
    arr = np.zeros((len(sel), width))
    if width:
        starts = np.cumsum([0] + [len(p[1][0]) for p in parts])
        chunk_sel = np.searchsorted(starts, sel, side="right") - 1
        for i, part in enumerate(parts):
            pick = np.flatnonzero(valid & (chunk_sel == i))
            if len(pick):
                lo, hi = starts[i], starts[i + 1]
                # positions are relative to each chunk's own page buffer
                gather_arrays(part[0], sel[pick] - lo, pick, apos[lo:hi], acode[lo:hi], width, arr)
    return StriderResult(np.ascontiguousarray(scal[sel]), arr, valid, int(nblocks), len(blk),
                         fetch_s, decode_s, int(amb.sum()))


def _xact_status(conn: psycopg.Connection, ids: np.ndarray) -> np.ndarray:
    rows = conn.execute("SELECT pg_xact_status(x::text::xid8) FROM unnest(%s::int8[]) WITH ORDINALITY u(x, i) "
                        "ORDER BY i", (ids.tolist(),)).fetchall()
    code = {"committed": 1, "aborted": 0}
    return np.array([code.get(r[0], -1) for r in rows], np.int8)


def _visible_tids(conn: psycopg.Connection, rel: RelationInfo, blk: np.ndarray, lpn: np.ndarray) -> np.ndarray:
    """Which of these exact tuple versions PostgreSQL's own check finds visible (TID scan)."""
    tids = [f"({b},{o})" for b, o in zip(blk.tolist(), lpn.tolist())]
    rows = conn.execute(sql.SQL("SELECT ctid::text FROM {} WHERE ctid = ANY(%s::tid[])").format(rel.ident),
                        (tids,)).fetchall()
    seen = {r[0] for r in rows}
    return np.array([t in seen for t in tids], bool)
