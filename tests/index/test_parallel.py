"""Kernels over the slices of a range, on every core."""
from __future__ import annotations

import os
import threading

import pytest

from learnedidx.index import parallel


def test_over_range_runs_every_slice_once_and_raises_errors():
    seen = []
    parallel.over_range(lambda lo, hi: seen.extend(range(lo, hi)), 1000, 37)
    assert sorted(seen) == list(range(1000))
    parallel.over_range(lambda lo, hi: seen.append((lo, hi)), 0, 4)
    assert seen[-1] == (0, 0)

    def boom(lo, hi):
        if lo >= 500:
            raise ValueError("slice failed")

    with pytest.raises(ValueError, match="slice failed"):
        parallel.over_range(boom, 1000, 10)


def test_slices_run_on_several_threads_at_once_when_there_are_cores():
    if parallel.CORES < 2:
        pytest.skip("one core")
    inside = threading.Barrier(2, timeout=10)  # two slices must be running together to pass
    parallel.over_range(lambda lo, hi: inside.wait(), 2, 2)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_gets_a_pool_of_its_own():
    import multiprocessing

    parallel.over_range(lambda lo, hi: None, 8, 8)  # the parent's pool exists
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:  # over_range in the child would wait forever on the parent's threads
        assert pool.apply_async(_sum_in_child).get(timeout=60) == sum(range(1000))


def _sum_in_child() -> int:
    seen: list = []
    parallel.over_range(lambda lo, hi: seen.extend(range(lo, hi)), 1000, 8)
    return sum(seen)
