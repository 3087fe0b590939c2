"""Memory for the rows a call keeps: huge pages, kept for the next call for a while.

Rows kept in memory are read again in order (accumulate passes) or in a random order (SGD
epochs); in a random order over a gigabyte, 4 KiB pages make nearly every row a TLB miss,
which under a hypervisor's nested page tables costs more than the row's computation (an SGD
epoch ran 2.4× slower on 4 KiB pages than on huge pages here).  But a fresh huge page is
expensive where the hypervisor takes freed memory back (free page reporting returns 2 MiB
blocks to the host, so the next huge-page fault waits for the host: about 3 s per GiB here,
against 0.5 s with 4 KiB pages).  So a call's region is kept when the call ends and reused by
the next call that fits in it, for :data:`KEEP_SECONDS` at most: a server that trains again
soon pays for its huge pages once.  Idle regions are at most :data:`MAX_IDLE`, each no larger
than one call's memory limit.
"""
from __future__ import annotations

import mmap
import threading
import time

KEEP_SECONDS = 300.0  #: an idle region is unmapped after this long
MAX_IDLE = 1  #: idle regions kept at most
GRAIN = 64 << 20  #: region sizes are multiples of this, so that similar calls reuse them

_lock = threading.Lock()
_idle: list[tuple[float, mmap.mmap]] = []  # (when it was given back, region), oldest first


def take(nbytes: int) -> mmap.mmap:
    """A region of at least ``nbytes`` bytes (an idle one when one fits, else a new one)."""
    size = max(GRAIN, -(-nbytes // GRAIN) * GRAIN)
    with _lock:
        fits = [i for i, (_, m) in enumerate(_idle) if size <= len(m) <= 2 * size]
        if fits:
            return _idle.pop(min(fits, key=lambda i: len(_idle[i][1])))[1]
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_HUGEPAGE)
    return region


def give(region: mmap.mmap) -> None:
    """Take ``region`` back (nothing may use it any more): kept for a later call for a while."""
    with _lock:
        _idle.append((time.monotonic(), region))
        while len(_idle) > MAX_IDLE:
            _close(_idle.pop(0)[1])
    timer = threading.Timer(KEEP_SECONDS + 1.0, expire)
    timer.daemon = True
    timer.start()


def expire(now: float | None = None) -> None:
    """Unmap the regions idle for longer than KEEP_SECONDS."""
    now = time.monotonic() if now is None else now
    with _lock:
        old = [r for r in _idle if now - r[0] >= KEEP_SECONDS]
        _idle[:] = [r for r in _idle if now - r[0] < KEEP_SECONDS]
    for _, region in old:
        _close(region)


def idle_bytes() -> int:
    with _lock:
        return sum(len(m) for _, m in _idle)


def small_pages_for_temporaries() -> None:
    """numpy advises huge pages for every array of 4 MiB or more; a server's temporaries
    (checks, statistics, a label mapping: one pass over the rows each) then pay the slow
    huge-page faults above, several times what they compute.  Only the regions here, which
    training reads again and again, ask for huge pages."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # numpy 1
        from numpy.core.multiarray import _set_madvise_hugepage
    _set_madvise_hugepage(False)


def _close(region: mmap.mmap) -> None:
    try:
        region.close()
    except BufferError:  # an array still refers to it: it goes with the array
        pass
