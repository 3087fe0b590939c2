"""``learnedidx bench compare``: every peer on identical YCSB streams; Markdown table and plots."""
from __future__ import annotations

from pathlib import Path

import typer

from learnedidx.bench.common import console, print_table


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
        axes[0][0].set_ylabel("latency (us), main op")
        axes[0][-1].legend(fontsize=7)
        fig.tight_layout()
        f = out / f"latency-{mode}.png"
        fig.savefig(f, dpi=120)
        plt.close(fig)
        files.append(f)
    return files


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
    ) -> None:
        """Run every peer on identical operation streams; ratios are learnedidx / peer."""
        from learnedidx.workloads.cli import run_ycsb
        from learnedidx.workloads.peers import available_peers

        ok, skipped = available_peers()
        for name, why in skipped.items():
            console.print(f"[yellow]skipping peer {name}: {why}[/yellow]")
        plist = ok if peers == "all" else [p for p in peers.split(",") if p in ok]
        wl = workloads.split(",")
        ml = modes.split(",")
        out.mkdir(parents=True, exist_ok=True)
        results: dict = {}
        for w in wl:
            for p in plist:
                with console.status(f"workload {w} on {p}"):
                    reps = run_ycsb(w, records, operations, [p], ml, {}, keys or None, seed)
                for r in reps:
                    if r.phase != "run":
                        continue
                    j = r.to_json()
                    main = max(j["ops"].values(), key=lambda o: o["operations"])
                    results[(w, p, r.mode)] = {"throughput": r.throughput, "p50": main["p50_us"],
                                               "p95": main["p95_us"], "p99": main["p99_us"], "digest": r.digest}
            digests = {results[(w, p, m)]["digest"] for p in plist for m in ml}
            if len(digests) != 1:
                console.print(f"[red]workload {w}: peers disagree on read results[/red]")
        lines = ["| workload | mode | " + " | ".join(plist) + " | best peer (not learnedidx) | learnedidx / best |",
                 "|" + "---|" * (len(plist) + 4)]
        rows = []
        for w in wl:
            for m in ml:
                tp = {p: results[(w, p, m)]["throughput"] for p in plist}
                others = {p: v for p, v in tp.items() if not p.startswith("learnedidx")}
                best = max(others, key=others.get) if others else "-"
                ratio = tp.get("learnedidx", 0) / others[best] if others else float("nan")
                lines.append(f"| {w} | {m} | " + " | ".join(f"{tp[p]:,.0f}" for p in plist) + f" | {best} | {ratio:.2f} |")
                rows.append([w, m] + [tp[p] for p in plist] + [best, ratio])
        (out / "results.md").write_text(
            f"# YCSB run-phase throughput (ops/s), {records:,} records, {operations:,} operations\n\n"
            + "\n".join(lines) + "\n")
        print_table("throughput (ops/s)", ["workload", "mode"] + plist + ["best peer", "learnedidx/best"], rows)
        for f in plot(results, wl, plist, ml, out):
            console.print(f"wrote {f}")
        console.print(f"wrote {out / 'results.md'}")
