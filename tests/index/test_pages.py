"""The huge-page pool of a store's group arrays and value slots (learnedidx/index/_pages.c)."""
from __future__ import annotations

import ctypes
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from learnedidx.index import pages
from learnedidx.index import pyobjects as P

_pages = pytest.importorskip("learnedidx.index._pages")


@pytest.mark.parametrize("n", [1, 4095, 4096, 4097, 5000, 8192, 8193, 100_000, 1 << 20, (8 << 20) - 1, 8 << 20,
                               (8 << 20) + 1, 20 << 20])
def test_a_block_is_the_request_in_whole_pages(n: int) -> None:
    size = _pages.block_size(n)
    assert size >= n and size % 4096 == 0
    assert size - n < (4096 if n <= _pages.MAX_POOLED else 2 << 20)
    b = _pages.Block(n)
    assert b.address % 4096 == 0 and len(memoryview(b)) == n


def test_bad_requests_are_refused() -> None:
    with pytest.raises(ValueError):
        _pages.Block(0)
    with pytest.raises(ValueError):
        _pages.block_size(-1)
    with pytest.raises(TypeError):
        _pages.Slots((1, 2))  # a list only
    with pytest.raises(ValueError):
        _pages.Slots([], -1)
    with pytest.raises(MemoryError):
        _pages.Slots([], sys.maxsize // 4)


def _fresh(code: str) -> str:
    """Run code in a new interpreter (a pool no other test has used); its output."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_blocks_are_placed_first_fit_in_freed_pages_and_zeroed_when_asked() -> None:
    # The oracle: a map of a region's 65,536 pages in Python; every block must land on the
    # first run of free pages that holds it, freed neighbours merged, never overlapping a
    # block in use, and a zeroed block must read zeros whatever its pages held before.
    code = """if True:
        import random
        import numpy as np
        from learnedidx.index import _pages
        rng = random.Random(7)
        keep = _pages.Block(1)  # a block in use all along: the region stays mapped
        base, live = keep.address, {}
        free = bytearray(b"\\0") + bytearray(b"\\1") * 65535
        for step in range(3000):
            if live and (rng.random() < 0.45 or len(live) > 60):
                page = rng.choice(list(live))
                k = live.pop(page)[0]  # the block's last reference goes with it
                free[page:page + k] = b"\\1" * k
                continue
            n = rng.choice([1, 4095, 4097, 20_000, 300_000, 2 << 20, 5 << 20])
            zero = rng.random() < 0.5
            b = _pages.Block(n, zero)
            k = _pages.block_size(n) // 4096
            page = (b.address - base) // 4096
            assert page == bytes(free).find(b"\\1" * k), (step, page)
            a = np.frombuffer(b, np.uint8)
            if zero:
                assert not a.any(), step
            a[:] = 0xAB
            free[page:page + k] = b"\\0" * k
            live[page] = (k, b)
            del a, b
        assert _pages.regions() == 1
        print("ok")
    """
    assert _fresh(code).startswith("ok")


def test_huge_pages_left_empty_go_back_to_the_system() -> None:
    code = """if True:
        import numpy as np
        from learnedidx.index import _pages, pages
        def rss():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) >> 10
        keep = pages.empty(100, np.int64)  # a block in use: the region stays mapped
        keep = pages.empty(1000, np.int64)
        a = [pages.empty(1 << 17, np.int64) for _ in range(64)]  # 64 MiB, then written
        for x in a:
            x[:] = 1
        r0 = rss()
        del a, x
        r1 = rss()
        assert _pages.regions() == 1 and _pages.given_back() >= 31, _pages.given_back()
        assert r0 - r1 >= 60, (r0, r1)
        b = pages.zeros(1 << 20, np.int64)  # fresh pages again, zeros
        assert not b.any()
        print("ok")
    """
    assert _fresh(code).startswith("ok")


def test_the_regions_go_back_when_no_block_is_in_use() -> None:
    code = """if True:
        import numpy as np
        from learnedidx.index import _pages, pages
        assert _pages.regions() == 0
        a = [pages.empty(1 << 20, np.int64) for _ in range(40)]  # 320 MiB: two regions
        big = pages.zeros(3 << 20, np.int64)  # mapped alone, never in a region
        r = _pages.regions()
        assert r == 2 and _pages.committed() == 40 << 23
        del a
        assert _pages.committed() == 0 and _pages.regions() == 0
        del big
        assert _pages.regions() == 0
        b = pages.empty(100_000, np.uint8)
        assert _pages.regions() == 1
        print("ok", r)
    """
    assert _fresh(code).startswith("ok")


def test_arrays_are_numpys_own_kind() -> None:
    for dt in (np.int64, np.uint8, np.float64):
        for n in (0, 3, 600, 70_000):
            for make, ref in ((pages.empty, np.empty), (pages.zeros, np.zeros)):
                a = make(n, dt)
                r = ref(n, dt)
                assert a.shape == r.shape and a.dtype == r.dtype
                assert a.flags.writeable and a.flags.aligned and a.flags.c_contiguous
                if make is pages.zeros:
                    assert not a.any()
                a[:] = 7
                assert (a == 7).all()


def test_blocks_count_in_tracemalloc_and_in_committed() -> None:
    before = _pages.committed()
    tracemalloc.start()
    try:
        t0 = tracemalloc.get_traced_memory()[0]
        a = pages.empty(1 << 20, np.uint8)
        assert tracemalloc.get_traced_memory()[0] - t0 >= 1 << 20
        assert _pages.committed() - before >= 1 << 20
        del a
        assert tracemalloc.get_traced_memory()[0] - t0 < 1 << 16
        assert _pages.committed() == before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("m, extra", [(0, 0), (0, 5), (3, 0), (3, 600), (1000, 2048)])
def test_slots_hold_one_reference_per_slot_and_read_as_a_list(m: int, extra: int) -> None:
    objs = [b"value %d" % i * 3 for i in range(m)]
    counts = [sys.getrefcount(o) for o in objs]
    s = _pages.Slots(objs, extra)
    assert len(s) == m + extra and list(s) == objs + [None] * extra
    assert [sys.getrefcount(o) for o in objs] == [c + 1 for c in counts]
    if m + extra:
        # laid out as a list: compiled code finds the count and the item array where a list has them
        items = P.items_address(s)
        word = ctypes.c_ssize_t.from_address
        assert items != 0 and word(id(s) + 16).value == m + extra
        assert [word(items + 8 * i).value for i in range(m + extra)] == [id(x) for x in list(s)]
    c = s.copy()
    assert list(c) == list(s)
    if m + extra:
        assert P.items_address(c) != P.items_address(s)
    assert [sys.getrefcount(o) for o in objs] == [k + 2 for k in counts]
    with pytest.raises(IndexError):
        s[m + extra]
    del s, c
    assert [sys.getrefcount(o) for o in objs] == counts


def test_slots_release_the_nones_they_hold() -> None:
    n0 = sys.getrefcount(None)
    s = _pages.Slots([], 100_000)
    n1 = sys.getrefcount(None)
    c = s.copy()
    n2 = sys.getrefcount(None)
    del s, c
    n3 = sys.getrefcount(None)
    assert n1 - n0 > 99_000 and n2 - n1 > 99_000 and abs(n3 - n0) < 1_000


def test_without_the_c_module_the_same_calls_give_numpy_arrays_and_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "BUILT", False)
    a = pages.zeros(70_000, np.int64)
    assert type(a.base) is not _pages.Block and not a.any()
    s = pages.slots([b"a", b"b"], 2)
    assert type(s) is list and s == [b"a", b"b", None, None]
    assert pages.copy(s) == s and pages.copy(s) is not s


def test_a_store_keeps_its_groups_in_the_pool() -> None:
    import learnedidx
    with learnedidx.open(retrain="off", group_size=4096) as db:
        keys = [b"key%08d" % i for i in range(40_000)]
        for k in keys:
            db.put(k, k[::-1])
        db.retrain_now()
        live = db._live
        grp = next(g for g in live.groups if g is not None and len(g.heads) >= 1024)
        assert type(grp.vals) is _pages.Slots
        assert type(grp.heads.base) is _pages.Block
        assert all(db.get(k) == k[::-1] for k in keys)
