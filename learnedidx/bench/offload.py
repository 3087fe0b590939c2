"""``learnedidx bench offload``: where retraining runs, and what serving throughput that leaves."""
from __future__ import annotations

import tempfile
from pathlib import Path

import typer

from learnedidx.bench.common import console, print_table

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
    w = Workload.from_properties(load_properties(workload),
                                 {"recordcount": str(records), "operationcount": str(operations)})
    ks = KeySpace(w)
    return load_stream(w, ks, seed), run_stream(w, ks, seed)


def _device(servers: dict, backend: str | None) -> dict:
    """The server device's counters (zeros for in-process retraining)."""
    if backend is None:
        return {"busy_seconds": 0.0, "modelled_seconds": 0.0}
    from learnedidx.server.client import Client

    with Client(servers[backend].socket_path) as c:
        return c.call("stats")[0]["device"]


def register(app: typer.Typer) -> None:
    @app.command("offload")
    def offload(
        workloads: str = typer.Option("D,E,D',E',twitter-37", help="YCSB workloads and twitter-<cluster>"),
        records: int = typer.Option(1_000_000),
        operations: int = typer.Option(500_000),
        buffer_threshold: int = typer.Option(64, help="store buffer threshold (small: retrain often)"),
        quick: bool = typer.Option(False),
        seed: int = typer.Option(0),
    ) -> None:
        """Serving throughput and p99 with retraining inline, on a thread, on the server (cpu / fpga-emu)."""
        from learnedidx.server.process import spawn
        from learnedidx.workloads.peers import get_adapter
        from learnedidx.workloads.runner import execute

        if quick:
            records, operations = 20_000, 20_000
        tmp = Path(tempfile.mkdtemp(prefix="lidx-offload-"))
        servers = {b: spawn(str(tmp / f"{b}.sock"), backend=b) for b in ("cpu", "fpga-emu")}
        rows = []
        try:
            for wl in workloads.split(","):
                load, run = _streams(wl, records, operations, seed)
                digests = {}
                base = None
                for name, (opts, backend) in CONFIGS.items():
                    o = {**opts, "buffer_threshold": buffer_threshold, "retrain_interval": 0.05}
                    if backend:
                        o["trainer_options"] = {"socket": servers[backend].socket_path}
                    ad = get_adapter("learnedidx", **o)
                    try:
                        with console.status(f"{wl}: {name}"):
                            execute(ad, load, mode="batch", phase="load")
                            ad.settle()
                            before, dev0 = ad.db.stats(), _device(servers, backend)
                            rep = execute(ad, run, mode="per-op")
                            after, dev1 = ad.db.stats(), _device(servers, backend)
                    finally:
                        ad.close()
                    digests[name] = rep.digest
                    p99 = max(h.get_value_at_percentile(99) for h in rep.hist.values())
                    base = base or rep.throughput
                    rows.append([wl, name, rep.throughput, rep.throughput / base, p99,
                                 after["train_seconds"] - before["train_seconds"],
                                 after["retrains_incremental"] - before["retrains_incremental"],
                                 dev1["busy_seconds"] - dev0["busy_seconds"],
                                 dev1["modelled_seconds"] - dev0["modelled_seconds"],
                                 "fallback!" if after["trainer_failed"] else "ok"])
                same = len(set(digests.values())) == 1
                console.print(f"{wl}: read results identical across configurations: {same}")
        finally:
            for s in servers.values():
                s.stop()
        print_table(f"offload: {records:,} records, {operations:,} ops per-op serving",
                    ["workload", "retraining", "ops/s", "vs (a)", "p99 us", "train s", "incr. retrains",
                     "server busy s", "modelled device s", "trainer"], rows)
