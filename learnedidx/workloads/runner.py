"""Executes operation streams against an adapter and reports like the YCSB client.

Two modes, both labelled in the output:

* ``per-op``: one Python API call per operation, each timed (what an application sees);
* ``batch``: runs of consecutive point operations (reads, updates, inserts,
  read-modify-writes, in any mix) go through ``apply_many``, runs of scans through
  ``scan_many``; the learned index answers a whole run's lookups in one compiled call, and
  a read still sees every earlier write (peers without a native mixed batch use
  ``get_many``/``put_many`` on its same-kind stretches).  Operations are not timed one by
  one in this mode: the latency of an operation is the time of the batch it ran in (from the
  call to its return, when the caller has its answer), and the report's header says so.
"""
from __future__ import annotations

import array
import gc
import json
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from hdrh.histogram import HdrHistogram

from learnedidx.errors import WorkloadError
from learnedidx.workloads.peers import Adapter
from learnedidx.workloads.spec import DELETE, INSERT, OP_NAMES, READ, RMW, SCAN, UPDATE, OpStream

MAX_BATCH = 4096
#: The header note of a batch-mode report: what its latencies are.
BATCH_LATENCY = "latency: the time of the batch each operation ran in"
# A batch's scan results are all alive at once: the cap keeps them to a few MB (E's
# scans average 50 pairs; at this cap its throughput measured the same as at 4,096 scans).
MAX_SCAN_PAIRS = 8192


@dataclass
class Report:
    peer: str
    phase: str
    mode: str
    runtime_ms: float = 0.0  #: including finish_ms
    finish_ms: float = 0.0  #: the peer finishing the work it deferred (:meth:`Adapter.finish`)
    operations: int = 0
    hist: dict = field(default_factory=dict)  # op name -> HdrHistogram (us)
    digest: int = 0  # CRC of every read/scan result, to check peers agree

    @property
    def throughput(self) -> float:
        return self.operations / (self.runtime_ms / 1000.0) if self.runtime_ms else 0.0

    def lines(self) -> list[str]:
        note = f" ({BATCH_LATENCY})" if self.mode == "batch" else ""
        out = [f"# peer={self.peer} phase={self.phase} mode={self.mode}{note}",
               f"[OVERALL], RunTime(ms), {self.runtime_ms:.0f}",
               f"[OVERALL], Throughput(ops/sec), {self.throughput:.2f}",
               f"[OVERALL], FinishTime(ms), {self.finish_ms:.0f}"]
        for name, h in self.hist.items():
            n = h.get_total_count()
            out += [f"[{name}], Operations, {n}",
                    f"[{name}], AverageLatency(us), {h.get_mean_value():.3f}",
                    f"[{name}], MinLatency(us), {h.get_min_value()}",
                    f"[{name}], MaxLatency(us), {h.get_max_value()}",
                    f"[{name}], 50thPercentileLatency(us), {h.get_value_at_percentile(50)}",
                    f"[{name}], 95thPercentileLatency(us), {h.get_value_at_percentile(95)}",
                    f"[{name}], 99thPercentileLatency(us), {h.get_value_at_percentile(99)}",
                    f"[{name}], Return=OK, {n}"]
        return out

    def to_json(self) -> dict:
        return {"peer": self.peer, "phase": self.phase, "mode": self.mode,
                "latency": "batch" if self.mode == "batch" else "operation", "runtime_ms": self.runtime_ms,
                "finish_ms": self.finish_ms,
                "operations": self.operations, "throughput": self.throughput, "digest": self.digest,
                "ops": {name: {"operations": h.get_total_count(), "avg_us": h.get_mean_value(),
                               "p50_us": h.get_value_at_percentile(50), "p95_us": h.get_value_at_percentile(95),
                               "p99_us": h.get_value_at_percentile(99), "max_us": h.get_max_value()}
                        for name, h in self.hist.items()}}


def latency_histogram() -> HdrHistogram:
    """A histogram of latencies in microseconds, 1 µs to an hour, 3 significant digits."""
    return HdrHistogram(1, 3_600_000_000, 3)


_EDGE = 64  # bytes of each end of a value that the digest reads


def fingerprint(v: bytes) -> bytes:
    """What the digest reads of a value: all of it up to 2 * _EDGE bytes, else its length,
    first and last _EDGE bytes (see :class:`_Digest`)."""
    if len(v) <= 2 * _EDGE:
        return v
    return len(v).to_bytes(8, "little") + v[:_EDGE] + v[-_EDGE:]


class _Digest:
    """CRC-32 chained, in operation order, over each value read (a marker for a missing
    key) and the length, keys and values of each scan.

    Of a value longer than 128 bytes it reads the length and the first and last 64 bytes:
    a wrong, stale or truncated value changes them (YCSB's values are windows of a random
    pool, a new one per write).  Reading all of every value would evict the store's data
    from the caches between operations (a batch of scans returns about a megabyte of
    values) and slow the timed part of a run (docs/workloads.md), although it is not timed."""

    _MISSING = b"\x00<none>"

    def __init__(self) -> None:
        self.crc = 0

    def read(self, v: bytes | None) -> None:
        """One read's result."""
        self.crc = zlib.crc32(self._MISSING if v is None else fingerprint(v), self.crc)

    def reads(self, results: list, values: list) -> None:
        """The read results of a batch (where ``values`` holds None)."""
        crc, missing = self.crc, self._MISSING
        for r, v in zip(results, values):
            if v is None:
                crc = zlib.crc32(missing if r is None else fingerprint(r), crc)
        self.crc = crc

    def scan(self, pairs: list) -> None:
        crc = zlib.crc32(len(pairs).to_bytes(4, "little"), self.crc)  # [] and missing differ
        for k, v in pairs:
            crc = zlib.crc32(fingerprint(v), zlib.crc32(k, crc))
        self.crc = crc


Progress = Callable[[int], None]


def execute(adapter: Adapter, stream: OpStream, *, mode: str = "per-op", phase: str = "run",
            progress: Progress | None = None, threads: int = 1, finish: bool = True,
            on_start: Callable[[], None] | None = None) -> Report:
    """Run ``stream`` against ``adapter``; ``progress(n)`` is called with each ``n`` ops done,
    ``on_start()`` once the runner's own arrays are made, just before the first operation
    (one thread: a memory measure of the run then counts the peer's memory only).

    With ``finish`` the clock stops only when the adapter has finished the work it deferred
    (:meth:`Adapter.finish`: the learned index folds its insert buffers in and retrains
    every group that is due), so that peers are compared on equal work.

    With ``threads > 1`` (adapters with ``thread_safe``), thread ``t`` runs operations
    ``t, t + threads, ...``; histograms are merged and the digest chains the threads' digests
    in thread order (comparable between runs only for read-only streams)."""
    if mode not in ("per-op", "batch"):
        raise ValueError("mode must be 'per-op' or 'batch'")
    if threads > 1 and not adapter.thread_safe:
        raise WorkloadError(f"peer {adapter.name} does not support concurrent threads")
    run = _per_op if mode == "per-op" else _batched
    parts: list = [OpStream(stream.ops[t::threads], stream.keys[t::threads], stream.scan_lengths[t::threads],
                            stream.values[t::threads]) for t in range(threads)]
    if mode == "batch":
        parts = [_plan(p) for p in parts]
    results: list = [None] * threads
    # The streams (millions of keys and values in lists) stay as they are during the run:
    # moved out of the cyclic collector's reach, so that its passes over them are not
    # charged to the peer under test (the same for every peer).
    gc.collect()
    gc.freeze()

    def work(t: int) -> None:
        results[t] = run(adapter, parts[t], progress, on_start if threads == 1 else None)

    if threads == 1:
        work(0)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, range(threads)))
    finish_ns = 0
    if finish:
        t0 = time.perf_counter_ns()
        adapter.finish()
        finish_ns = time.perf_counter_ns() - t0
    # The run time is the slowest thread's, without the time it spent on the digest (a check
    # of this runner's own, costing as much as a fast store's lookup: it would blur every ratio).
    rep = Report(adapter.name, phase, mode, runtime_ms=(max(r[2] for r in results) + finish_ns) / 1e6,
                 finish_ms=finish_ns / 1e6, operations=len(stream.ops))
    hists: dict[str, HdrHistogram] = {}
    for part_hists, crc, _ in results:
        for name, h in part_hists.items():
            hists.setdefault(name, latency_histogram()).add(h)
        rep.digest = crc if threads == 1 else zlib.crc32(crc.to_bytes(4, "little"), rep.digest)
    rep.hist = dict(sorted(hists.items()))
    return rep


def _per_op(adapter: Adapter, stream: OpStream, progress: Progress | None,
            on_start: Callable[[], None] | None) -> tuple[dict, int, int]:
    ops = stream.ops.tolist()
    if SCAN in set(ops):
        return _per_op_scans(adapter, stream, progress, on_start)
    # Point operations only: latencies to a flat array and read results (references, no
    # copies) to a list, both read after the run, so that the loop does no more than call
    # and time (recording into an HdrHistogram from Python costs more than some peers'
    # operations, docs/workloads.md).
    n = len(ops)
    keys, vals = stream.keys, stream.values
    lat = array.array("q", bytes(8 * n))
    reads: list = [None] * n
    get, put, delete = adapter.get, adapter.put, adapter.delete
    clock = time.perf_counter_ns
    if on_start is not None:
        on_start()
    start = clock()
    for i, o in enumerate(ops):
        if o == READ:
            t0 = clock()
            reads[i] = get(keys[i])
        elif o == RMW:
            t0 = clock()
            reads[i] = get(keys[i])
            put(keys[i], vals[i])
        elif o == DELETE:
            t0 = clock()
            delete(keys[i])
        else:
            t0 = clock()
            put(keys[i], vals[i])
        lat[i] = clock() - t0
        if progress is not None and (i & 0xFFFF) == 0xFFFF:
            progress(0x10000)
    elapsed = clock() - start
    if progress is not None:
        progress(n & 0xFFFF)
    digest = _Digest()
    for i, o in enumerate(ops):
        if o == READ or o == RMW:
            digest.read(reads[i])
    lats = np.frombuffer(lat, np.int64)
    return _histograms({o: lats[stream.ops == o] for o in set(ops)}), digest.crc, elapsed


def _histograms(latencies: dict) -> dict:
    """Per operation name, the histogram of its latencies (ns arrays, recorded in µs)."""
    hists = {}
    for o, a in latencies.items():
        us, counts = np.unique(np.maximum(np.asarray(a, np.int64) // 1000, 1), return_counts=True)
        h = hists[OP_NAMES[o]] = latency_histogram()
        for v, c in zip(us.tolist(), counts.tolist()):
            h.record_value(v, c)
    return hists


def _per_op_scans(adapter: Adapter, stream: OpStream, progress: Progress | None,
                  on_start: Callable[[], None] | None) -> tuple[dict, int, int]:
    """Per-op runs with scans: every result is digested as it comes, off the clock (scan
    results are too large to keep)."""
    ops = stream.ops.tolist()
    keys, vals, sls = stream.keys, stream.values, stream.scan_lengths.tolist()
    # Latencies go to flat arrays and into the histograms after the run: recording into an
    # HdrHistogram from Python costs more than some peers' operations (docs/workloads.md).
    lat = {o: array.array("q") for o in set(ops)}
    rec = {o: a.append for o, a in lat.items()}
    get, put, scan, delete = adapter.get, adapter.put, adapter.scan, adapter.delete
    clock = time.perf_counter_ns
    digest = _Digest()
    digest_ns = 0
    if on_start is not None:
        on_start()
    start = clock()
    for i, o in enumerate(ops):
        t0 = clock()
        if o == READ:
            r = get(keys[i])
            t1 = clock()
            digest.read(r)
        elif o == SCAN:
            r = scan(keys[i], sls[i])
            t1 = clock()
            digest.scan(r)
        elif o == RMW:
            r = get(keys[i])
            put(keys[i], vals[i])
            t1 = clock()
            digest.read(r)
        elif o == DELETE:
            delete(keys[i])
            t1 = clock()
        else:
            put(keys[i], vals[i])
            t1 = clock()
        rec[o](t1 - t0)
        digest_ns += clock() - t1
        if progress is not None and (i & 0xFFFF) == 0xFFFF:
            progress(0x10000)
    if progress is not None:
        progress(len(ops) & 0xFFFF)
    elapsed = clock() - start - digest_ns
    return _histograms({o: np.frombuffer(a, np.int64) for o, a in lat.items()}), digest.crc, elapsed


_POINT = (READ, UPDATE, INSERT, RMW)


def segment_end(ops: list, sls: list, i: int) -> int:
    """End of the batch starting at ``i``: point reads and writes (any mix) batch together
    through ``apply_many``; scans and deletes batch with their own kind, scans up to
    ``MAX_SCAN_PAIRS`` pairs in all."""
    n, o = len(ops), ops[i]
    j = i + 1
    if o in _POINT:
        while j < n and ops[j] in _POINT and j - i < MAX_BATCH:
            j += 1
    elif o == SCAN:
        pairs = sls[i]
        while j < n and ops[j] == o and j - i < MAX_BATCH and pairs + sls[j] <= MAX_SCAN_PAIRS:
            pairs += sls[j]
            j += 1
    else:
        while j < n and ops[j] == o and j - i < MAX_BATCH:
            j += 1
    return j


def _plan(stream: OpStream) -> list[tuple]:
    """The batches of ``stream`` as ready-made call arguments (built before the clock starts,
    like the operations themselves): ``(op, args, {op name: count})``."""
    ops = stream.ops.tolist()
    keys, vals, sls = stream.keys, stream.values, stream.scan_lengths.tolist()
    plan = []
    i, n = 0, len(ops)
    while i < n:
        o = ops[i]
        j = segment_end(ops, sls, i)
        if o in _POINT:
            # A read-modify-write is a read then a write of the same key.
            bk, bv = [], []
            for x in range(i, j):
                if ops[x] in (READ, RMW):
                    bk.append(keys[x])
                    bv.append(None)
                if ops[x] != READ:
                    bk.append(keys[x])
                    bv.append(vals[x])
            args: tuple = (bk, bv)
        elif o == SCAN:  # one count for all when they agree (E' has fixed-length scans)
            lens = sls[i:j]
            args = (keys[i:j], lens[0] if min(lens) == max(lens) else lens)
        else:
            args = (keys[i:j],)
        plan.append((o, args, {OP_NAMES[op]: c for op, c in Counter(ops[i:j]).items()}))
        i = j
    return plan


def _batched(adapter: Adapter, plan: list[tuple], progress: Progress | None,
             on_start: Callable[[], None] | None) -> tuple[dict, int, int]:
    hists: dict[str, HdrHistogram] = {}
    clock = time.perf_counter_ns
    digest = _Digest()
    digest_ns = 0
    if on_start is not None:
        on_start()
    start = clock()
    for o, args, counts in plan:
        t0 = clock()
        if o in _POINT:
            res = adapter.apply_many(*args)
        elif o == SCAN:
            res = adapter.scan_many(*args)
        else:
            res = [adapter.delete(k) for k in args[0]]
        t1 = clock()
        if o in _POINT:
            digest.reads(res, args[1])
        elif o == SCAN:
            for r in res:
                digest.scan(r)
        digest_ns += clock() - t1
        n = sum(counts.values())
        took = max(1, (t1 - t0) // 1000)  # every operation of the batch waited for all of it
        for name, c in counts.items():
            (hists.get(name) or hists.setdefault(name, latency_histogram())).record_value(took, c)
        if progress is not None:
            progress(n)
    return hists, digest.crc, clock() - start - digest_ns


def dumps(reports: list[Report]) -> str:
    return json.dumps([r.to_json() for r in reports], indent=2)
