"""``learnedidx bench compare``: every peer on identical YCSB streams; Markdown table and plots."""
from __future__ import annotations

import gc
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, Optional

import typer

from learnedidx.bench.common import console


def plot(results: dict, workloads: list[str], peers: list[str], modes: list[str], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    files = []
    for mode in modes:
        fig, ax = plt.subplots(figsize=(10, 4.5))
        width = 0.8 / len(peers)
        x = np.arange(len(workloads))
        for i, p in enumerate(peers):
            ys = [results.get((w, p, mode), {}).get("throughput", 0) / 1e3 for w in workloads]
            ax.bar(x + i * width, ys, width, label=p)
        ax.set_xticks(x + 0.4 - width / 2, workloads)
        ax.set_ylabel("throughput (k ops/s)")
        ax.set_title(f"YCSB run phase, {mode} mode")
        ax.legend(fontsize=8)
        fig.tight_layout()
        f = out / f"throughput-{mode}.png"
        fig.savefig(f, dpi=120)
        plt.close(fig)
        files.append(f)
        fig, axes = plt.subplots(1, len(workloads), figsize=(3 * len(workloads), 3.5), sharey=True, squeeze=False)
        for ax, w in zip(axes[0], workloads):
            for p in peers:
                r = results.get((w, p, mode))
                if r:
                    ax.plot([50, 95, 99], [r["p50"], r["p95"], r["p99"]], marker="o", label=p)
            ax.set_title(w)
            ax.set_yscale("log")
            ax.set_xlabel("percentile")
        axes[0][0].set_ylabel("latency (us), main op" + (": its batch's" if mode == "batch" else ""))
        axes[0][-1].legend(fontsize=7)
        fig.tight_layout()
        f = out / f"latency-{mode}.png"
        fig.savefig(f, dpi=120)
        plt.close(fig)
        files.append(f)
    return files


#: The streams of the workload being compared, for the runs forked from ``compare``: a
#: child reads them from the memory it shares with the parent, nothing is pickled.
_STREAMS: tuple | None = None


def figures(r) -> dict:
    """What ``compare`` keeps of a run report: throughput, the main operation's latency
    percentiles (µs) and the digest."""
    main = max(r.to_json()["ops"].values(), key=lambda o: o["operations"])
    return {"throughput": r.throughput, "p50": main["p50_us"], "p95": main["p95_us"], "p99": main["p99_us"],
            "digest": r.digest}


def _run_here(peer: str, mode: str) -> list[tuple[str, str, dict]]:
    """Load then run the workload's streams on ``peer`` (one that ``runnable_peers``
    kept) in ``mode``, in this process: (peer, mode, figures) of the run."""
    from learnedidx.workloads.cli import run_peers

    load, run = _STREAMS
    return [(r.peer, r.mode, figures(r)) for r in run_peers(load, run, [peer], [mode], probe=False)
            if r.phase == "run"]


def _run_in_child(peer: str, mode: str) -> list[tuple[str, str, dict]]:
    """:func:`_run_here` in the child :func:`_run_forked` made."""
    gc.freeze()  # the collector leaves the parent's objects alone
    for stream in _STREAMS:  # their pages become the child's before any clock starts
        for objs in (stream.keys, stream.values):
            for _ in objs:
                pass
    return _run_here(peer, mode)


def _run_forked(peer: str, mode: str, warn: Callable[[str], None]) -> list[tuple[str, str, dict]]:
    """:func:`_run_here` in a child forked for it, so that no run inherits an earlier run's
    heap: every run starts from the parent's, which holds the streams and no store (as the
    SIndex driver starts each run in a process of its own).  A child that dies is reported
    through ``warn`` and its run skipped, as a crashed driver's is."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        try:
            return pool.submit(_run_in_child, peer, mode).result()
        except BrokenProcessPool:
            warn(f"peer {peer} ({mode}): the process running it died; run skipped")
            return []


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        workloads: str = typer.Option("A,B,C,D,E,F", help="workloads (A-F, D', E', or .properties files)"),
        peers: str = typer.Option("all", help="comma-separated peers or 'all' (those that install)"),
        records: int = typer.Option(1_000_000, help="recordcount"),
        operations: int = typer.Option(1_000_000, help="operationcount"),
        modes: str = typer.Option("per-op,batch"),
        keys: str = typer.Option("", help="real keys: 'words', 'geonames' or a file"),
        out: Path = typer.Option(Path("bench-out/compare"), help="output folder"),
        seed: int = typer.Option(0),
        repeat: int = typer.Option(1, min=1, help="runs per peer and mode (each loads afresh); the median counts"),
        prop: list[str] = typer.Option([], "-p", help="property override name=value for every workload (repeatable), "
                                                      "e.g. -p fieldcount=1 for 100-byte values"),
        sindex_driver: Optional[Path] = typer.Option(
            None, help="the SIndex driver program for the sindex peers (default: $LEARNEDIDX_SINDEX_DRIVER)"),
        isolate: bool = typer.Option(True, "--isolate/--same-process",
                                     help="run each Python peer, mode and repetition in a process forked for it "
                                          "(else all in this one, each run on the heap the earlier ones left)"),
    ) -> None:
        """Run every peer on identical operation streams; ratios are learnedidx / peer."""
        from learnedidx.workloads.cli import parse_overrides, runnable_peers, warm_learned_index, ycsb_streams
        from learnedidx.workloads.peers import PEERS, SINDEX_DRIVER_ENV, available_peers
        from learnedidx.workloads.sindex import run_whole_streams

        if sindex_driver is not None:
            os.environ[SINDEX_DRIVER_ENV] = str(sindex_driver)
        plist, skipped = available_peers(list(PEERS) if peers == "all" else peers.split(","), whole_streams=True)
        for name, why in skipped.items():
            console.print(f"[yellow]skipping peer {name}: {why}[/yellow]")
        wl, ml = workloads.split(","), modes.split(",")
        out.mkdir(parents=True, exist_ok=True)
        results: dict = {}
        every: list = []  # each run's figures, in the order they ran
        fork = isolate and "fork" in multiprocessing.get_all_start_methods()

        def warn(msg: str) -> None:
            console.print(f"[red]{msg}[/red]")
        warm_learned_index(plist, console)  # in this process: the forked runs inherit the compiled kernels
        global _STREAMS
        for w in wl:
            console.print(f"workload {w}: generating {records:,} records and {operations:,} operations")
            load, run = _STREAMS = ycsb_streams(w, records, operations, parse_overrides(prop), keys or None, seed)
            runs: dict = {}
            in_process = runnable_peers([p for p in plist if not PEERS[p][0].whole_streams], run, probe=False)
            for _ in range(repeat):  # peers alternate between repetitions, so drift hits all alike
                done = []
                for p in in_process:
                    for m in ml:
                        done += _run_forked(p, m, warn) if fork else _run_here(p, m)
                done += [(r.peer, r.mode, figures(r)) for r in run_whole_streams(load, run, plist, ml, warn=warn)
                         if r.phase == "run"]
                for peer, mode, fig in done:
                    runs.setdefault((w, peer, mode), []).append(fig)
                    every.append({"workload": w, "peer": peer, "mode": mode, **fig})
            for key, rs in runs.items():
                results[key] = sorted(rs, key=lambda x: x["throughput"])[len(rs) // 2]  # the median run
                results[key]["digest"] = rs[0]["digest"] if len({x["digest"] for x in rs}) == 1 else -1
            if len({v["digest"] for (w2, _, _), v in results.items() if w2 == w}) > 1:
                console.print(f"[red]workload {w}: peers disagree on read results[/red]")
        _STREAMS = None
        table = results_table(results, wl, plist, ml)
        (out / "results.md").write_text(
            f"# YCSB run-phase throughput (ops/s), {records:,} records, {operations:,} operations"
            f"{f', median of {repeat} runs' if repeat > 1 else ''}\n\n"
            + "\n".join(table) + "\n")
        (out / "runs.json").write_text(json.dumps(every, indent=1) + "\n")
        console.print("\n".join(table), markup=False)
        for f in plot(results, wl, plist, ml, out):
            console.print(f"wrote {f}")
        console.print(f"wrote {out / 'results.md'}")


def results_table(results: dict, workloads: list[str], peers: list[str], modes: list[str]) -> list[str]:
    """Markdown rows: throughput per workload × mode × peer ("-" where a peer was skipped), the best
    peer whose name does not start with ``learnedidx`` and the ratio learnedidx / best."""
    lines = ["| workload | mode | " + " | ".join(peers) + " | best peer (not learnedidx) | learnedidx / best |",
             "|" + "---|" * (len(peers) + 4)]
    for w in workloads:
        for m in modes:
            tp = {p: results[(w, p, m)]["throughput"] for p in peers if (w, p, m) in results}
            others = {p: v for p, v in tp.items() if not p.startswith("learnedidx")}
            best = max(others, key=others.__getitem__) if others else "-"
            ratio = f"{tp['learnedidx'] / others[best]:.2f}" if others and "learnedidx" in tp else "-"
            cells = [f"{tp[p]:,.0f}" if p in tp else "-" for p in peers]
            lines.append(f"| {w} | {m} | " + " | ".join(cells) + f" | {best} | {ratio} |")
    return lines
