"""Running a compiled kernel that releases the GIL (``nogil=True``) on every core, over the
parts of a range: a thread pool, shared by the whole process, that kernels working on
disjoint slices of their output arrays use (bulk builds train their groups this way).

Threads, not Numba's ``parallel=True``: its default threading layer does not allow two
threads of the process to run parallel kernels at once, and a store may build groups in
its background merge thread while another thread bulk-loads a second store."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

#: Cores this process may run on.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

_pool: ThreadPoolExecutor | None = None


def _forget_pool() -> None:
    """In a forked child: the pool's threads did not survive the fork, start a new pool."""
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(1, CORES - 1), thread_name_prefix="learnedidx-kernel")
    return _pool


def over_range(fn: Callable[[int, int], None], n: int, parts: int) -> None:
    """``fn(lo, hi)`` over ``parts`` consecutive slices of ``range(n)`` (fewer when ``n`` is
    smaller), the calling thread and the pool's taking the next slice as they finish one;
    returns when all are done, raising the first error raised.  ``fn`` must not call
    this function (the pool's threads would wait for each other)."""
    parts = max(1, min(parts, n))
    bounds = [n * p // parts for p in range(parts + 1)]
    todo = iter(range(parts))  # next() of a range iterator is atomic: each slice runs once

    def work() -> None:
        for p in todo:
            fn(bounds[p], bounds[p + 1])

    futures = [_executor().submit(work) for _ in range(min(CORES, parts) - 1)]
    try:
        work()
    finally:
        for f in futures:
            f.result()
