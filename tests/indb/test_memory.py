"""The memory of rows kept: regions reused by the next call that fits, unmapped when idle."""
import time

import numpy as np

from learnedidx.indb.read import memory


def test_a_region_given_back_is_reused_then_unmapped_when_idle(monkeypatch):
    monkeypatch.setattr(memory, "_idle", [])
    a = memory.take(10 << 20)
    assert len(a) >= 10 << 20
    np.frombuffer(a, np.uint8)[:] = 7  # written once: reuse skips the page faults
    memory.give(a)
    assert memory.idle_bytes() == len(a)
    b = memory.take(20 << 20)  # fits the same region
    assert b is a and memory.idle_bytes() == 0
    big = memory.take(len(a) * 3)  # more than twice as large: a region of its own
    assert big is not a and len(big) >= len(a) * 3
    memory.give(b)
    memory.give(big)
    assert memory.idle_bytes() == len(big)  # one idle region at most: the oldest went
    assert a.closed
    memory.expire(time.monotonic() + memory.KEEP_SECONDS)
    assert memory.idle_bytes() == 0 and big.closed


def test_a_region_an_array_still_uses_is_not_unmapped_under_it(monkeypatch):
    monkeypatch.setattr(memory, "_idle", [])
    region = memory.take(1 << 20)
    rows = np.frombuffer(region, np.float64, 16)
    rows[:] = 3.0
    memory.give(region)
    memory.expire(time.monotonic() + memory.KEEP_SECONDS)  # closing fails while rows exist: left to them
    assert memory.idle_bytes() == 0 and rows.sum() == 48.0
