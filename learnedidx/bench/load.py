"""``learnedidx bench load``: bulk load of N keys, from lists of keys and values in memory to
a structure answering lookups, beside the builds of ordered-map peers from the same lists.

Every measurement runs in a fresh process (so that no run inherits another's memory or
warm caches, and the peak memory of a build is its own): the process makes the key and
value lists, warms the learned index's kernels up, then times the build alone and checks
that the result answers lookups.  Peers: ``learnedidx`` (``put_many`` into an empty store),
``sorteddict`` (``SortedDict(zip(keys, values))``), ``sortedlist`` (the last value of each
key kept through a dict, then one ``sorted`` and the values in key order: two aligned lists
for ``bisect``), and ``sindex``, SIndex in its C++ driver program (the sindex peer's, see
docs/workloads.md), given the same keys and values in a stream file: the time of its load
phase as the driver measures it (sort, deduplication and SIndex's constructor, which trains
every group and the root), skipped with a message where the driver is not built.
"""
from __future__ import annotations

import gc
import multiprocessing
import os
import random
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import typer

from learnedidx.bench.common import console, parse_list, print_table, reset_peak, status_kib, trim_heap

PEERS = ("learnedidx", "sorteddict", "sortedlist", "sindex")


def make_keys(spec: str) -> list[bytes]:
    """The keys of a key set: ``ycsb:N`` (YCSB's N load keys, ``user`` + hashed number, in
    load order), ``words`` (Debian's English word list, shuffled with seed 0) or a path."""
    m = re.fullmatch(r"ycsb:(\d+)", spec)
    if m:
        from learnedidx.workloads.generators import key_names
        return key_names(np.arange(int(m.group(1)), dtype=np.int64))
    from learnedidx.workloads.keysources import load_keys
    keys = load_keys(spec)
    random.Random(0).shuffle(keys)
    return keys


def _learnedidx(keys: list[bytes], values: list[bytes]) -> Callable[[bytes], object]:
    import learnedidx
    db = learnedidx.open(retrain="off")
    db.put_many(keys, values)
    return db.get


def _sorteddict(keys: list[bytes], values: list[bytes]) -> Callable[[bytes], object]:
    from sortedcontainers import SortedDict
    return SortedDict(zip(keys, values)).get


def _sortedlist(keys: list[bytes], values: list[bytes]) -> Callable[[bytes], object]:
    import bisect
    d = dict(zip(keys, values))
    ks = sorted(d)
    vs = [d[k] for k in ks]

    def get(k: bytes) -> object:
        i = bisect.bisect_left(ks, k)
        return vs[i] if i < len(ks) and ks[i] == k else None

    return get


BUILDS: dict[str, Callable[[list[bytes], list[bytes]], Callable[[bytes], object]]] = {
    "learnedidx": _learnedidx, "sorteddict": _sorteddict, "sortedlist": _sortedlist}


def _sindex(keys: list[bytes], values: list[bytes]) -> dict:
    """SIndex's bulk load of the pairs, in its driver program: seconds and distinct keys."""
    from learnedidx.workloads.peers import SIndexAdapter
    from learnedidx.workloads.sindex import run_driver, write_stream_file
    from learnedidx.workloads.spec import INSERT, OpStream

    n = len(keys)
    load = OpStream(np.full(n, INSERT, np.int8), keys, np.zeros(n, np.int32), values)
    run = OpStream(np.zeros(0, np.int8), [], np.zeros(0, np.int32), [])
    # On tmpfs where there is one: the write-back of a file just written to disk would
    # compete with the driver (it cost SIndex's load a third more in its first run).
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="lidx-load-", dir=shm) as folder:
        path = str(Path(folder) / "load.ops")
        write_stream_file(path, load, run)
        report = run_driver(SIndexAdapter(), path, "batch")[0]
    return {"seconds": report.runtime_ms / 1e3, "keys": len(dict.fromkeys(keys)), "peak_mib": None, "after_mib": None}


def measure_one(peer: str, spec: str) -> dict:
    """One build of ``spec``'s keys (each with its own 8-byte value) by ``peer``, in this
    process: seconds, keys, and the growth of the resident size at the build's peak and
    once it is done (MiB; None where /proc does not tell)."""
    keys = make_keys(spec)
    values = [b"%08d" % i for i in range(len(keys))]
    if peer == "sindex":  # a program of its own: its time as it measures it, no memory figures
        return _sindex(keys, values)
    if peer == "learnedidx":
        from learnedidx.workloads.peers import warm_up_learned_index
        warm_up_learned_index()
    gc.collect()
    peak_ok = reset_peak()
    rss0 = status_kib("VmRSS")
    t0 = time.perf_counter()
    get = BUILDS[peer](keys, values)
    seconds = time.perf_counter() - t0
    peak = status_kib("VmHWM")
    trim_heap()
    rss1 = status_kib("VmRSS")
    probe = np.random.default_rng(1).integers(0, len(keys), 1000).tolist() if keys else []
    last = dict(zip(keys, values))  # the oracle: the last value of each key
    if any(get(keys[i]) != last[keys[i]] for i in probe) or get(b"\xff" * 80) is not None:
        raise AssertionError(f"{peer} answers lookups wrongly after the load")
    mib = 1 / 1024
    return {"seconds": seconds, "keys": len(last), "peak_mib": (peak - rss0) * mib if peak_ok and rss0 else None,
            "after_mib": (rss1 - rss0) * mib if rss0 else None}


def measure(peer: str, spec: str) -> dict:
    """:func:`measure_one` in a fresh process."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(measure_one, (peer, spec))


def run(specs: list[str], peers: list[str], repeat: int) -> dict:
    """Results by (key set, peer): lists of :func:`measure` results, the peers interleaved
    within each repeat so that a slow spell of a shared machine hits all of them."""
    out: dict = {}
    for spec in specs:
        for _ in range(repeat):
            for p in peers:
                with console.status(f"{p}: bulk load of {spec}"):
                    out.setdefault((spec, p), []).append(measure(p, spec))
    return out


def table_rows(results: dict, specs: list[str], peers: list[str]) -> list[list]:
    """Median seconds, keys per second, the growth of the resident size at the peak (the
    largest) and at rest; then the time ratios of learnedidx to each peer (below 1:
    learnedidx is faster)."""
    rows = []
    for spec in specs:
        med = {}
        for p in peers:
            rs = results[(spec, p)]
            med[p] = statistics.median(r["seconds"] for r in rs)
            peaks = [r["peak_mib"] for r in rs if r["peak_mib"] is not None]
            afters = [r["after_mib"] for r in rs if r["after_mib"] is not None]
            rows.append([spec, p, f"{rs[0]['keys']:,}", med[p], f"{rs[0]['keys'] / med[p]:,.0f}",
                         max(peaks) if peaks else "-", statistics.median(afters) if afters else "-"])
        if "learnedidx" in med:
            for p in peers:
                if p != "learnedidx":
                    rows.append([spec, f"learnedidx / {p}", "", med["learnedidx"] / med[p], "", "", ""])
    return rows


def register(app: typer.Typer) -> None:
    @app.command("load")
    def load(
        keys: str = typer.Option("ycsb:1000000,ycsb:10000000,words",
                                 help="key sets: ycsb:N, words, geonames or a file of keys"),
        peers: str = typer.Option(",".join(PEERS)),
        repeat: int = typer.Option(3, help="runs per peer and key set (medians; memory: the largest peak)"),
        quick: bool = typer.Option(False, help="20,000 YCSB keys, one run"),
    ) -> None:
        """Bulk load: lists of keys and values to a structure answering lookups, each build
        in a fresh process; ratios are learnedidx's time / the peer's."""
        if quick:
            keys, repeat = "ycsb:20000", 1
        specs, names = parse_list(keys, str), parse_list(peers, str)
        unknown = sorted(set(names) - set(PEERS))
        if unknown:
            raise typer.BadParameter(f"unknown peer(s) {', '.join(unknown)}; peers: {', '.join(PEERS)}")
        if "sindex" in names:
            from learnedidx.errors import WorkloadError
            from learnedidx.workloads.peers import sindex_driver
            try:
                sindex_driver()
            except WorkloadError as exc:
                console.print(f"skipping peer sindex: {exc}")
                names.remove("sindex")
        results = run(specs, names, repeat)
        print_table(f"bulk load, median of {repeat} (each key with its own 8-byte value)",
                    ["keys", "peer", "distinct keys", "seconds", "keys/s", "peak MiB", "at rest MiB"],
                    table_rows(results, specs, names))
