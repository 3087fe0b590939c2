"""``learnedidx ycsb ...`` and ``learnedidx trace ...``."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:  # the heavy modules load when a command runs
    from learnedidx.workloads.runner import Report
    from learnedidx.workloads.spec import OpStream

ycsb_app = typer.Typer(help="YCSB load/run against the store and its peers.", no_args_is_help=True)
trace_app = typer.Typer(help="Twitter cache traces: generate and replay.", no_args_is_help=True)
store_app = typer.Typer(help="Checks of the store itself.", no_args_is_help=True)
err = Console(stderr=True)


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise typer.BadParameter(f"-p takes name=value, not {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def ycsb_streams(workload: str, records: int | None, operations: int | None, overrides: dict[str, str],
                 keys: str | None, seed: int) -> tuple[OpStream, OpStream]:
    """The load and run streams of ``workload`` (``--records``/``--operations`` win over ``-p``)."""
    from learnedidx.workloads.keysources import load_keys
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
    return load_stream(w, ks, seed), run_stream(w, ks, seed)


def runnable_peers(peers: list[str], run: OpStream, threads: int = 1, *, probe: bool = True) -> list[str]:
    """The peers that can run ``run`` here; each other one is skipped with a message (never a
    failure).  ``probe=False``: ``peers`` are known to open here (:func:`available_peers`
    said so), only what ``run`` needs is checked."""
    from learnedidx.workloads.peers import PEERS, available_peers
    from learnedidx.workloads.spec import SCAN

    ok, skipped = available_peers(peers) if probe else (list(peers), {})
    for name in ok:
        if not PEERS[name][0].scans and bool((run.ops == SCAN).any()):
            skipped[name] = "does not support scans"
        elif threads > 1 and not PEERS[name][0].thread_safe:
            skipped[name] = "does not support concurrent threads"
    for name, why in skipped.items():
        err.print(f"[yellow]skipping peer {name}: {why}[/yellow]")
    return [p for p in ok if p not in skipped]


def warm_learned_index(peers: list[str], console: Console = err) -> None:
    """Compile the store's kernels before any peer runs, when one of ``peers`` is the store,
    showing which stage is compiling and for how long: the first run of an installation
    compiles them all (minutes), later runs load them from Numba's cache in a moment."""
    from learnedidx.workloads.peers import (PEERS, WARM_UP_STAGES, LearnedIndexAdapter, learned_index_warm,
                                            warm_up_learned_index)

    if learned_index_warm() or not any(issubclass(PEERS[p][0], LearnedIndexAdapter) for p in peers if p in PEERS):
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("the learned index's kernels (compiled once, then loaded from Numba's cache)",
                            total=len(WARM_UP_STAGES))
        steps = iter(range(len(WARM_UP_STAGES)))

        def stage(name: str) -> None:
            bar.update(task, completed=next(steps), description=f"compiling the learned index's kernels: {name} "
                                                                "(once; later runs load them from Numba's cache)")
            bar.refresh()  # every stage shown, however fast
        warm_up_learned_index(stage)
        bar.update(task, completed=len(WARM_UP_STAGES), description="the learned index's kernels are ready")


def run_peers(load: OpStream, run: OpStream, peers: list[str], modes: list[str], *, threads: int = 1,
              store_options: dict | None = None, progress: bool = True, probe: bool = True) -> list[Report]:
    """Load then run the streams on each peer and mode (a fresh adapter each); the load and
    run reports.  Peers that cannot run here are skipped with a message (``probe``: as in
    :func:`runnable_peers`)."""
    from learnedidx.workloads.peers import get_adapter
    from learnedidx.workloads.runner import execute

    reports = []
    runnable = runnable_peers(peers, run, threads, probe=probe)
    if progress:
        warm_learned_index(runnable)
    with Progress(*Progress.get_default_columns(), console=err, transient=True,
                  disable=not (progress and err.is_terminal)) as bar:
        for peer in runnable:
            for mode in modes:
                ad = get_adapter(peer, **((store_options or {}) if peer.startswith("learnedidx") else {}))
                try:
                    for phase, stream in (("load", load), ("run", run)):
                        task = bar.add_task(f"{peer} {mode} {phase}", total=len(stream.ops))
                        reports.append(execute(ad, stream, mode=mode, phase=phase, threads=threads,
                                               progress=lambda n, t=task: bar.advance(t, n)))
                        bar.remove_task(task)
                finally:
                    ad.close()
    return reports


def print_reports(reports: list[Report], json_out: bool, compare_digests: bool) -> None:
    """YCSB text (or JSON); exit 1 when ``compare_digests`` and the run digests differ."""
    from learnedidx.workloads.runner import dumps

    if json_out:
        typer.echo(dumps(reports))
        return
    for r in reports:
        typer.echo("\n".join(r.lines()))
    if compare_digests and len({r.digest for r in reports if r.phase == "run"}) > 1:
        err.print("[red]peers returned different read results[/red]")
        raise typer.Exit(1)


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
    threads: int = typer.Option(1, "--threads", min=1, help="client threads (peers that are thread-safe)"),
    json_out: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Load then run a YCSB workload on the embedded store (and peers), printing YCSB-format results."""
    modes = ["per-op", "batch"] if mode == "both" else [mode]
    load, run = ycsb_streams(workload, records, operations, parse_overrides(prop), keys, seed)
    reports = run_peers(load, run, peer, modes, threads=threads)
    print_reports(reports, json_out, compare_digests=threads == 1)


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
    from learnedidx.workloads.twitter import replay_streams

    skipped: list[int] = []

    def report_skip(lineno: int, why: str) -> None:
        skipped.append(lineno)
        if len(skipped) <= 10:
            err.print(f"[yellow]skipped malformed line {lineno}: {why}[/yellow]")

    load, run = replay_streams(path, load_requests, on_error="raise" if strict else "skip", on_skip=report_skip)
    if len(skipped) > 10:
        err.print(f"[yellow]skipped {len(skipped):,} malformed lines in all[/yellow]")
    reports = run_peers(load, run, peer, ["per-op", "batch"] if mode == "both" else [mode])
    print_reports(reports, json_out, compare_digests=True)


@store_app.command("crash-test")
def crash_test(
    rounds: int = typer.Option(300, help="child processes to kill"),
    directory: Optional[str] = typer.Option(None, "--dir", help="store directory (default: a new temporary one)"),
    seed: int = typer.Option(0, help="seed of the operations, options and kill moments"),
    run_seconds: float = typer.Option(1.5, help="a child writes for up to this long before it is killed"),
) -> None:
    """SIGKILL a writing child process at random moments (a quarter of them while it opens
    the store) and check every reopened state against an oracle (docs/store.md)."""
    import tempfile

    from learnedidx.workloads.crash import run

    path = directory or tempfile.mkdtemp(prefix="learnedidx-crash-")
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("crash rounds", total=rounds)
        report = run(path, rounds, seed, run_seconds=run_seconds,
                     progress=lambda rnd, r: bar.update(task, completed=rnd + 1))
    r = report
    typer.echo(f"{r.rounds} rounds in {r.seconds:.0f} s on {path}: {r.killed_in_ops} killed while writing, "
               f"{r.killed_in_open} while opening (recovery), {r.finished} closed the store first; "
               f"{r.acknowledged} acknowledged operations, {r.checks} reopened states checked, "
               f"{r.in_doubt_applied} in-flight operations found applied")
    typer.echo(f"acknowledged writes lost: {r.lost}, wrong values: {r.wrong}, half-applied: {r.half_applied}")
    for f in r.failures:
        err.print(f)
    if not r.ok:
        raise typer.Exit(1)
