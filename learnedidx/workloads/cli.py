"""``learnedidx ycsb ...`` and ``learnedidx trace ...``."""
from __future__ import annotations

import random
from typing import Optional

import typer
from rich.console import Console

ycsb_app = typer.Typer(help="YCSB load/run against the store and its peers.", no_args_is_help=True)
trace_app = typer.Typer(help="Twitter cache traces: generate and replay.", no_args_is_help=True)
err = Console(stderr=True)


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise typer.BadParameter(f"-p takes name=value, not {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def run_ycsb(workload: str, records: int | None, operations: int | None, peers: list[str], modes: list[str],
             overrides: dict[str, str], keys: str | None, seed: int, store_options: dict | None = None):
    """Load + run ``workload`` on each peer and mode; returns the reports (load and run)."""
    from learnedidx.workloads.keysources import load_keys
    from learnedidx.workloads.peers import get_adapter
    from learnedidx.workloads.runner import execute
    from learnedidx.workloads.spec import KeySpace, Workload, load_properties, load_stream, run_stream

    ov = dict(overrides)
    if records is not None:
        ov["recordcount"] = str(records)
    if operations is not None:
        ov["operationcount"] = str(operations)
    w = Workload.from_properties(load_properties(workload), ov)
    real = None
    if keys:
        real = load_keys(keys)
        random.Random(seed).shuffle(real)  # insertion order independent of the file's order
    ks = KeySpace(w, real)
    load = load_stream(w, ks, seed)
    run = run_stream(w, ks, seed)
    reports = []
    for peer in peers:
        for mode in modes:
            opts = store_options if peer.startswith("learnedidx") else {}
            ad = get_adapter(peer, **(opts or {}))
            try:
                reports.append(execute(ad, load, mode=mode, phase="load"))
                ad.settle()  # merge what the load buffered, untimed, as a server would between phases
                reports.append(execute(ad, run, mode=mode, phase="run"))
            finally:
                ad.close()
    return reports


@ycsb_app.command("run")
def ycsb_run(
    workload: str = typer.Option("A", "--workload", "-w", help="A-F, D', E' or a .properties file"),
    records: Optional[int] = typer.Option(None, "--records", help="recordcount"),
    operations: Optional[int] = typer.Option(None, "--operations", help="operationcount"),
    peer: list[str] = typer.Option(["learnedidx"], "--peer", help="peer(s) to run (repeatable)"),
    mode: str = typer.Option("both", "--mode", help="per-op, batch or both"),
    prop: list[str] = typer.Option([], "-p", help="property override name=value (repeatable)"),
    keys: Optional[str] = typer.Option(None, "--keys", help="real keys: 'words', 'geonames' or a file (one per line)"),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Load then run a YCSB workload on the embedded store (and peers), printing YCSB-format results."""
    from learnedidx.workloads.runner import dumps

    modes = ["per-op", "batch"] if mode == "both" else [mode]
    with err.status(f"running workload {workload}..."):
        reports = run_ycsb(workload, records, operations, peer, modes, parse_overrides(prop), keys, seed)
    if json_out:
        typer.echo(dumps(reports))
        return
    for r in reports:
        typer.echo("\n".join(r.lines()))
    runs = [r for r in reports if r.phase == "run"]
    if len({r.digest for r in runs}) > 1:
        err.print("[red]peers returned different read results[/red]")
        raise typer.Exit(1)


@trace_app.command("gen")
def trace_gen(
    cluster: str = typer.Option("12", "--cluster", help="cluster number (12, 15, 31, 37 built in)"),
    requests: int = typer.Option(1_000_000, "--requests"),
    out: str = typer.Option(..., "--out", help="output file (.zst to compress)"),
    stats_file: Optional[str] = typer.Option(None, "--stats", help="stat_2020Mar.md for other clusters"),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Write a synthetic trace in the real format with the cluster's statistics."""
    from learnedidx.workloads.twitter import cluster_stats, generate

    n = generate(cluster_stats(cluster, stats_file), requests, out, seed)
    typer.echo(f"wrote {requests:,} requests over {n:,} keys to {out}")


@trace_app.command("replay")
def trace_replay(
    path: str = typer.Argument(..., help="trace file (plain or .zst)"),
    load_requests: int = typer.Option(100_000, "--load-requests", help="requests whose keys are loaded first"),
    peer: list[str] = typer.Option(["learnedidx"], "--peer"),
    mode: str = typer.Option("both", "--mode"),
    strict: bool = typer.Option(False, "--strict", help="reject malformed lines instead of skipping them"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Load the distinct keys of the first requests, then replay the rest; report like YCSB."""
    from learnedidx.workloads.peers import get_adapter
    from learnedidx.workloads.runner import dumps, execute
    from learnedidx.workloads.twitter import replay_streams

    load, run = replay_streams(path, load_requests, on_error="raise" if strict else "skip")
    reports = []
    for p in peer:
        for m in (["per-op", "batch"] if mode == "both" else [mode]):
            ad = get_adapter(p)
            try:
                reports.append(execute(ad, load, mode=m, phase="load"))
                ad.settle()
                reports.append(execute(ad, run, mode=m, phase="run"))
            finally:
                ad.close()
    typer.echo(dumps(reports) if json_out else "\n".join(line for r in reports for line in r.lines()))
