"""Every invariant of a live index (learnedidx.index.layout), checked in plain Python from
its arrays: what the kernels assume, so that a test fails where an invariant breaks rather
than where a lookup happens to go wrong."""
from __future__ import annotations

import os

from learnedidx.index import foldin as FI
from learnedidx.index import layout as L
from learnedidx.index import pyobjects as P
from learnedidx.index.live import TOMB, LiveIndex


def head(b: bytes) -> int:
    """Reference for layout.head: 8 bytes big-endian, zero-padded, as a signed order key."""
    return int.from_bytes(b[:8].ljust(8, b"\0"), "big") - (1 << 63)


def lcp(a: bytes, b: bytes) -> int:
    return len(os.path.commonprefix([a, b]))


LOWEST, HIGHEST = -(1 << 63), (1 << 63) - 1


def root_sample(rhead: list[int]) -> list[int]:
    """Reference for search.sample_root: level by level from the top, node b of a level
    holds the heads of root entries (16 b + i) * 16**(levels below), i = 0..15; above the
    bottom its slot 0 is the lowest head, as is entry 0 (the first group's pivot bounds
    nothing), and slots past the last entry the highest."""
    n = len(rhead)
    levels = 1
    while 16 ** levels < n:
        levels += 1
    out = []
    for lvl in range(levels):
        per_node = 16 ** (levels - lvl)
        stride = per_node // 16
        for t in range(16 * -(-n // per_node)):
            if t == 0 or (lvl < levels - 1 and t % 16 == 0):
                out.append(LOWEST)
            else:
                out.append(rhead[t * stride] if t * stride < n else HIGHEST)
    return out


def contents(live: LiveIndex) -> dict[bytes, bytes]:
    """The live index's pairs, read from its arrays (merged then buffered, deletes skipped),
    after checking every invariant."""
    out: dict[bytes, bytes] = {}
    order = live.root_order()
    assert sorted(order) == sorted(set(order)) and all(live.groups[g] is not None for g in order)
    # The root: each group's pivot head, and the root search's sample of them.
    rhead = live.rhead[:len(order)].tolist()
    for r, g in enumerate(order):
        assert live.rpiv[r] == id(live.groups[g].pivot) and rhead[r] == head(live.groups[g].pivot)
    assert live.D[L.D_RSAMP] == live.rsamp.ctypes.data
    assert live.rsamp[:L.sample_size(len(order))].tolist() == root_sample(rhead)
    B = live.B
    for r, g in enumerate(order):
        row, grp = live.tab[g], live.groups[g]
        n = int(row[L.T_N])
        offs = grp.offs
        keys = [grp.kbytes[offs[i]:offs[i + 1]].tobytes() for i in range(n)]
        # The row points at the group's arrays.
        assert row[L.T_HEADS] == grp.heads.ctypes.data and row[L.T_OFFS] == offs.ctypes.data
        assert row[L.T_BYTES] == grp.kbytes.ctypes.data and row[L.T_BORD] == grp.bord.ctypes.data
        assert row[L.T_VITEMS] == P.items_address(grp.vals) and len(grp.vals) == n + 2 * B
        # Merged keys: sorted, distinct, in the group's range, sharing the prefix, heads right.
        assert keys == sorted(set(keys))
        lo_key = grp.pivot if r else None
        hi_key = live.groups[order[r + 1]].pivot if r + 1 < len(order) else None
        plen = int(row[L.T_HPREFIX])
        for i, k in enumerate(keys):
            assert (lo_key is None or k >= lo_key) and (hi_key is None or k < hi_key), (k, lo_key, hi_key)
            assert k[:plen] == keys[0][:plen] and len(k) >= plen
            assert grp.heads[i] == head(k[plen:])
        if n:
            assert row[L.T_P0] == head(keys[0]) and row[L.T_P1] == head(keys[0][8:])
            assert plen == (lcp(keys[0], keys[-1]) if n > 1 else 0)
        # Error bounds hold every merged key (they may be wider than the exact ones).
        lo, hi = FI.model_error_of(offs, grp.kbytes, n, int(row[L.T_MPREFIX]), int(row[L.T_FEAT]),
                                   live.coef[g])
        if n:
            assert row[L.T_ERRLO] <= lo and hi <= row[L.T_ERRHI], (g, lo, hi, row[L.T_ERRLO], row[L.T_ERRHI])
        tombs = 0
        for i, k in enumerate(keys):
            v = grp.vals[i]
            if v is TOMB:
                tombs += 1
            else:
                assert type(v) is bytes
                out[k] = v
        assert row[L.T_NTOMB] == tombs
        # Insert buffer: sorted, in the range, heads after the range prefix, no merged key.
        rp = int(row[L.T_RPREFIX])
        assert rp == (lcp(lo_key, hi_key) if lo_key is not None and hi_key is not None else 0)
        cnt = int(grp.bord[0])
        assert 0 <= cnt <= B
        bkeys = []
        slots = []
        for j in range(cnt):
            h, slot = int(grp.bord[1 + 2 * j]), int(grp.bord[2 + 2 * j])
            k, v = grp.vals[n + B + slot], grp.vals[n + slot]
            assert type(k) is bytes and h == head(k[rp:])
            assert (lo_key is None or k >= lo_key) and (hi_key is None or k < hi_key)
            bkeys.append(k)
            slots.append(slot)
            if v is not TOMB:
                assert type(v) is bytes
                out[k] = v
        assert bkeys == sorted(set(bkeys)) and not set(bkeys) & set(keys)
        assert sorted(slots) == list(range(cnt))
    return out
