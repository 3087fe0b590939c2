"""``learnedidx bench offload``: where retraining runs, and what serving throughput that
leaves, on equal work.

Each configuration runs in a fresh process: load, settle (every group trained), the timed
run, then the *drain*: every retrain the run left due is done (``retrain_now()``), timed.
A configuration that deferred work has not finished when its run ends, so the throughput
compared between configurations is over the run and its drain together; the run alone is
shown beside it, with the retrains done during the run, the backlog at its end (keys written
but not yet in a trained model), the writers' stalls, the server's busy and modelled device
time, and the store's memory: the growth of the process's resident size over what it held
before the load (the workload's streams, the kernels, an empty store), at its peak during
the run (what it held once loaded, plus the process's growth from the run's first
operation, when the runner's own arrays for the run are already made) and at rest once
the run's writes are folded in and retrained."""
from __future__ import annotations

import gc
import multiprocessing
import tempfile
import time
from pathlib import Path

import typer

from learnedidx.bench.common import console, print_table, reset_peak, status_kib, trim_heap

CONFIGS = {
    "a: inline (serving thread)": ({"retrain": "inline"}, None),
    "b: background thread": ({"retrain": "background"}, None),
    "c: server, cpu": ({"retrain": "background", "trainer": "server"}, "cpu"),
    "d: server, fpga-emu": ({"retrain": "background", "trainer": "server"}, "fpga-emu"),
}


def _streams(workload: str, records: int, operations: int, seed: int):
    from learnedidx.workloads.spec import KeySpace, Workload, load_properties, load_stream, run_stream
    from learnedidx.workloads.twitter import cluster_stats, generate, replay_streams

    if workload.startswith("twitter"):
        cluster = workload.split("-")[1]
        tmp = Path(tempfile.mkdtemp(prefix="lidx-trace-")) / f"c{cluster}.csv"
        generate(cluster_stats(cluster), records + operations, tmp, seed)
        return replay_streams(tmp, records)
    w = Workload.from_properties(load_properties(workload), {"recordcount": str(records), "operationcount": str(operations)})
    ks = KeySpace(w)
    return load_stream(w, ks, seed), run_stream(w, ks, seed)


def _device(socket: str | None) -> dict:
    """The server device's counters (zeros for in-process retraining)."""
    if socket is None:
        return {"busy_seconds": 0.0, "modelled_seconds": 0.0}
    from learnedidx.server.client import Client

    with Client(socket) as c:
        return c.call("stats")[0]["device"]


def run_config(workload: str, records: int, operations: int, seed: int, options: dict,
               socket: str | None) -> dict:
    """One configuration on one workload, in the calling process (see the module docstring)."""
    from learnedidx.workloads.peers import get_adapter
    from learnedidx.workloads.runner import execute

    load, run = _streams(workload, records, operations, seed)
    opts = dict(options)
    if socket:
        opts["trainer_options"] = {"socket": socket}
    ad = get_adapter("learnedidx", **opts)
    try:
        gc.collect()
        trim_heap()
        base = status_kib("VmRSS")  # the streams, the warmed-up kernels, an empty store
        execute(ad, load, mode="batch", phase="load")  # finished: every group trained
        gc.collect()
        trim_heap()
        loaded = status_kib("VmRSS")
        before, dev0 = ad.db.stats(), _device(socket)
        start = []

        def started() -> None:  # the runner's own arrays are made: the store's growth counts from here
            reset_peak()
            start.append(status_kib("VmRSS"))

        rep = execute(ad, run, mode="per-op", finish=False, on_start=started)  # the drain is timed below
        peak = loaded + status_kib("VmHWM") - start[0]  # the store's peak, without the runner's arrays
        mid = ad.db.stats()
        t0 = time.perf_counter()
        ad.db.retrain_now()
        drain = time.perf_counter() - t0
        after, dev1 = ad.db.stats(), _device(socket)
        gc.collect()
        trim_heap()
        rest = status_kib("VmRSS")
    finally:
        ad.close()
    run_s = rep.runtime_ms / 1000.0
    retrains = lambda s: s["retrains_full"] + s["retrains_incremental"]  # noqa: E731
    return {
        "ops": rep.operations, "run_s": run_s, "drain_s": drain, "digest": rep.digest,
        "p99_us": max(h.get_value_at_percentile(99) for h in rep.hist.values()),
        "retrains_run": retrains(mid) - retrains(before), "retrains_drain": retrains(after) - retrains(mid),
        "backlog_end": mid["backlog"], "stalls": mid["stalls"] - before["stalls"],
        "stall_s": mid["stall_seconds"] - before["stall_seconds"],
        "busy_s": dev1["busy_seconds"] - dev0["busy_seconds"],
        "modelled_s": dev1["modelled_seconds"] - dev0["modelled_seconds"],
        "peak_mib": (peak - base) / 1024, "rest_mib": (rest - base) / 1024,
        "fallback": after["trainer_failed"],
    }


def register(app: typer.Typer) -> None:
    @app.command("offload")
    def offload(
        workloads: str = typer.Option("D,D',E,E',RI,twitter-37",
                                      help="YCSB workloads (RI: half reads, half inserts), twitter-<cluster>"),
        records: int = typer.Option(1_000_000),
        operations: int = typer.Option(500_000),
        buffer_threshold: int = typer.Option(64, help="store buffer threshold (small: retrain often)"),
        quick: bool = typer.Option(False),
        seed: int = typer.Option(0),
    ) -> None:
        """Serving throughput and p99 with retraining inline, on a thread, on the server (cpu /
        fpga-emu), each configuration's deferred retraining counted (module docstring)."""
        from learnedidx.server.process import spawn

        if quick:
            records, operations = 20_000, 20_000
        tmp = Path(tempfile.mkdtemp(prefix="lidx-offload-"))
        servers = {b: spawn(str(tmp / f"{b}.sock"), backend=b, warm=True) for b in ("cpu", "fpga-emu")}
        rows = []
        ctx = multiprocessing.get_context("spawn")
        try:
            for wl in workloads.split(","):
                digests = {}
                base = None
                for name, (opts, backend) in CONFIGS.items():
                    o = {**opts, "buffer_threshold": buffer_threshold}
                    sock = servers[backend].socket_path if backend else None
                    with console.status(f"{wl}: {name}"), ctx.Pool(1) as pool:
                        r = pool.apply(run_config, (wl, records, operations, seed, o, sock))
                    digests[name] = r["digest"]
                    equal = r["ops"] / (r["run_s"] + r["drain_s"])
                    base = base or equal
                    rows.append([wl, name, r["ops"] / r["run_s"], equal, equal / base, r["p99_us"],
                                 r["retrains_run"], r["backlog_end"], r["drain_s"],
                                 f'{r["stalls"]} / {r["stall_s"]:.2f}', r["busy_s"], r["modelled_s"],
                                 r["peak_mib"], r["rest_mib"], r["peak_mib"] / r["rest_mib"],
                                 "fallback!" if r["fallback"] else "ok"])
                same = len(set(digests.values())) == 1
                console.print(f"{wl}: read results identical across configurations: {same}")
        finally:
            for s in servers.values():
                s.stop()
        print_table(f"offload: {records:,} records, {operations:,} ops per-op serving, then the deferred "
                    "retraining drained",
                    ["workload", "retraining", "run ops/s", "ops/s with drain", "vs (a), equal work", "p99 us",
                     "retrains in run", "backlog at end", "drain s", "stalls / s", "server busy s",
                     "modelled device s", "store peak MiB in run", "store MiB at rest after", "peak / rest",
                     "trainer"], rows)
