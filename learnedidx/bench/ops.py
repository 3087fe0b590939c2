"""``learnedidx bench ops``: point get, put and scan throughput against ordered-map peers."""
from __future__ import annotations

import gc
import time
import tracemalloc

import numpy as np
import typer

from learnedidx.bench.common import console, parse_list, print_table
from learnedidx.workloads.generators import key_names
from learnedidx.workloads.peers import get_adapter

PEERS = ("learnedidx", "sorteddict", "oobtree", "sortedlist")


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def memory_per_key(peer: str, n: int) -> float:
    """Bytes per key for 16-byte keys and 8-byte values (tracemalloc: Python heap + numpy arrays)."""
    perm = np.random.default_rng(9).permutation(n).tolist()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    keys = [b"%016d" % i for i in perm]  # allocated while tracing: kept key objects count
    vals = [b"%08d" % i for i in range(n)]
    ad = get_adapter(peer, **({"retrain": "off"} if peer == "learnedidx" else {}))
    ad.put_many(keys, vals)
    ad.finish()
    del keys, vals
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    ad.close()
    return used / n


def measure(peer: str, n: int, n_ops: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    keys = key_names(rng.permutation(n).astype(np.int64))
    val = b"v" * 8
    opts = {"retrain": "off"} if peer == "learnedidx" else {}
    ad = get_adapter(peer, **opts)
    out = {}
    t0 = time.perf_counter()
    ad.put_many(keys, [val] * n)
    ad.finish()
    out["load"] = _rate(n, time.perf_counter() - t0)
    probe = [keys[i] for i in rng.integers(0, n, n_ops).tolist()]
    get = ad.get
    ad.get_many(probe[:100])  # warm-up (compilation is not timed)
    ad.scan(probe[0], 100)
    t0 = time.perf_counter()
    for k in probe:
        get(k)
    out["get"] = _rate(n_ops, time.perf_counter() - t0)
    t0 = time.perf_counter()
    res = ad.get_many(probe)
    out["get_many"] = _rate(n_ops, time.perf_counter() - t0)
    assert all(r == val for r in res[:1000])
    n_scan = max(1, n_ops // 20)
    scan = ad.scan
    t0 = time.perf_counter()
    for k in probe[:n_scan]:
        scan(k, 100)
    out["scan100"] = _rate(n_scan, time.perf_counter() - t0)
    new = key_names(np.arange(n, n + n_ops, dtype=np.int64))
    put = ad.put
    t0 = time.perf_counter()
    for k in new:
        put(k, val)
    out["put"] = _rate(n_ops, time.perf_counter() - t0)
    ad.close()
    return out


def register(app: typer.Typer) -> None:
    @app.command("ops")
    def ops(
        sizes: str = typer.Option("1000000,10000000", help="numbers of keys"),
        n_ops: int = typer.Option(200_000, "--ops", help="operations per measurement"),
        peers: str = typer.Option(",".join(PEERS)),
        memory_keys: int = typer.Option(1_000_000, help="keys for the memory-per-key measurement (0: skip)"),
        quick: bool = typer.Option(False),
    ) -> None:
        """Per-op and batched get, put and scan(100) throughput; ratios are learnedidx / peer."""
        if quick:
            sizes, n_ops, memory_keys = "20000", 20000, 20000
        names = peers.split(",")
        for n in parse_list(sizes):
            results = {}
            for p in names:
                with console.status(f"{p}: {n:,} keys"):
                    results[p] = measure(p, n, n_ops)
            cols = ["load", "get", "get_many", "scan100", "put"]
            rows = [[p] + [results[p][c] for c in cols] for p in names]
            if "learnedidx" in results:
                li = results["learnedidx"]
                for p in names:
                    if p != "learnedidx":
                        rows.append([f"learnedidx / {p}"] + [li[c] / results[p][c] for c in cols])
            print_table(f"ops/s on {n:,} YCSB keys (8-byte values)", ["peer"] + cols, rows)
        if memory_keys:
            mem = [[p, memory_per_key(p, memory_keys)] for p in names]
            print_table(f"bytes per key ({memory_keys:,} 16-byte keys, 8-byte values)", ["peer", "bytes/key"], mem)
