"""Executes operation streams against an adapter and reports like the YCSB client.

Two modes, both labelled in the output:

* ``per-op``: one Python API call per operation, each timed (what an application sees);
* ``batch``: runs of consecutive operations of one kind go through ``get_many``,
  ``scan_many`` or ``put_many`` (the lookups then run inside compiled code for the learned
  index); a run never mixes reads and writes, so every read sees every earlier write.
  Latency of an operation is its batch's time divided by the batch size (amortised).
"""
from __future__ import annotations

import json
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from hdrh.histogram import HdrHistogram

from learnedidx.errors import WorkloadError
from learnedidx.workloads.peers import Adapter
from learnedidx.workloads.spec import DELETE, OP_NAMES, READ, RMW, SCAN, OpStream

MAX_BATCH = 4096


@dataclass
class Report:
    peer: str
    phase: str
    mode: str
    runtime_ms: float = 0.0
    operations: int = 0
    hist: dict = field(default_factory=dict)  # op name -> HdrHistogram (us)
    digest: int = 0  # CRC of every read/scan result, to check peers agree

    @property
    def throughput(self) -> float:
        return self.operations / (self.runtime_ms / 1000.0) if self.runtime_ms else 0.0

    def lines(self) -> list[str]:
        out = [f"# peer={self.peer} phase={self.phase} mode={self.mode}",
               f"[OVERALL], RunTime(ms), {self.runtime_ms:.0f}",
               f"[OVERALL], Throughput(ops/sec), {self.throughput:.2f}"]
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
        return {"peer": self.peer, "phase": self.phase, "mode": self.mode, "runtime_ms": self.runtime_ms,
                "operations": self.operations, "throughput": self.throughput, "digest": self.digest,
                "ops": {name: {"operations": h.get_total_count(), "avg_us": h.get_mean_value(),
                               "p50_us": h.get_value_at_percentile(50), "p95_us": h.get_value_at_percentile(95),
                               "p99_us": h.get_value_at_percentile(99), "max_us": h.get_max_value()}
                        for name, h in self.hist.items()}}


def _hist() -> HdrHistogram:
    return HdrHistogram(1, 3_600_000_000, 3)


def _crc_value(crc: int, v: bytes | None) -> int:
    return zlib.crc32(v if v is not None else b"\x00<none>", crc)


def _crc_scan(crc: int, pairs: list) -> int:
    """Keys and values of a scan, in order (a length marker first, so [] and missing differ)."""
    crc = zlib.crc32(len(pairs).to_bytes(4, "little"), crc)
    for k, v in pairs:
        crc = zlib.crc32(v, zlib.crc32(k, crc))
    return crc


Progress = Callable[[int], None]


def execute(adapter: Adapter, stream: OpStream, *, mode: str = "per-op", phase: str = "run",
            progress: Progress | None = None, threads: int = 1) -> Report:
    """Run ``stream`` against ``adapter``; ``progress(n)`` is called with each ``n`` ops done.

    With ``threads > 1`` (adapters with ``thread_safe``), thread ``t`` runs operations
    ``t, t + threads, ...``; histograms are merged and the digest chains the threads' digests
    in thread order (comparable between runs only for read-only streams)."""
    if mode not in ("per-op", "batch"):
        raise ValueError("mode must be 'per-op' or 'batch'")
    if threads > 1 and not adapter.thread_safe:
        raise WorkloadError(f"peer {adapter.name} does not support concurrent threads")
    run = _per_op if mode == "per-op" else _batched
    parts = [OpStream(stream.ops[t::threads], stream.keys[t::threads], stream.scan_lengths[t::threads],
                      stream.values[t::threads]) for t in range(threads)]
    results: list = [None] * threads

    def work(t: int) -> None:
        results[t] = run(adapter, parts[t], progress)

    t_start = time.perf_counter_ns()
    if threads == 1:
        work(0)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, range(threads)))
    rep = Report(adapter.name, phase, mode, runtime_ms=(time.perf_counter_ns() - t_start) / 1e6,
                 operations=len(stream.ops))
    hists: dict[str, HdrHistogram] = {}
    for part_hists, crc in results:
        for name, h in part_hists.items():
            hists.setdefault(name, _hist()).add(h)
        rep.digest = crc if threads == 1 else zlib.crc32(crc.to_bytes(4, "little"), rep.digest)
    rep.hist = dict(sorted(hists.items()))
    return rep


def _per_op(adapter: Adapter, stream: OpStream, progress: Progress | None) -> tuple[dict, int]:
    ops = stream.ops.tolist()
    keys, vals, sls = stream.keys, stream.values, stream.scan_lengths.tolist()
    hists = {OP_NAMES[o]: _hist() for o in set(ops)}
    rec = {o: hists[OP_NAMES[o]].record_value for o in set(ops)}
    get, put, scan, delete = adapter.get, adapter.put, adapter.scan, adapter.delete
    clock = time.perf_counter_ns
    crc = 0
    for i, o in enumerate(ops):
        t0 = clock()
        if o == READ:
            r = get(keys[i])
            t1 = clock()
            crc = _crc_value(crc, r)
        elif o == SCAN:
            r = scan(keys[i], sls[i])
            t1 = clock()
            crc = _crc_scan(crc, r)
        elif o == RMW:
            r = get(keys[i])
            put(keys[i], vals[i])
            t1 = clock()
            crc = _crc_value(crc, r)
        elif o == DELETE:
            delete(keys[i])
            t1 = clock()
        else:
            put(keys[i], vals[i])
            t1 = clock()
        rec[o](max(1, (t1 - t0) // 1000))
        if progress is not None and (i & 0xFFFF) == 0xFFFF:
            progress(0x10000)
    if progress is not None:
        progress(len(ops) & 0xFFFF)
    return hists, crc


def _batched(adapter: Adapter, stream: OpStream, progress: Progress | None) -> tuple[dict, int]:
    ops = stream.ops.tolist()
    keys, vals, sls = stream.keys, stream.values, stream.scan_lengths.tolist()
    hists: dict[str, HdrHistogram] = {}
    clock = time.perf_counter_ns
    crc = 0
    i, n = 0, len(ops)
    while i < n:
        o = ops[i]
        j = i + 1
        while j < n and ops[j] == o and j - i < MAX_BATCH:
            j += 1
        h = hists.get(OP_NAMES[o]) or hists.setdefault(OP_NAMES[o], _hist())
        bk = keys[i:j]
        t0 = clock()
        if o == READ:
            res = adapter.get_many(bk)
        elif o == SCAN:
            if len(set(sls[i:j])) == 1:
                res = adapter.scan_many(bk, sls[i])
            else:
                res = [adapter.scan(k, s) for k, s in zip(bk, sls[i:j])]
        elif o == RMW:
            # Reads of a batch must see earlier writes of the same batch: do it per key.
            res = []
            for k, v in zip(bk, vals[i:j]):
                res.append(adapter.get(k))
                adapter.put(k, v)
        elif o == DELETE:
            for k in bk:
                adapter.delete(k)
        else:
            # Later writes to the same key win, as in sequential execution.
            adapter.put_many(bk, vals[i:j])
        t1 = clock()
        if o == SCAN:
            for r in res:
                crc = _crc_scan(crc, r)
        elif o in (READ, RMW):
            for r in res:
                crc = _crc_value(crc, r)
        h.record_value(max(1, (t1 - t0) // 1000 // (j - i)), j - i)
        if progress is not None:
            progress(j - i)
        i = j
    return hists, crc


def dumps(reports: list[Report]) -> str:
    return json.dumps([r.to_json() for r in reports], indent=2)
