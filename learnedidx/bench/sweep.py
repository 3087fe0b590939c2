"""``learnedidx bench sweep``: what-if sweep of the emulated FPGA's cycle model."""
from __future__ import annotations

import itertools
from pathlib import Path

import typer

from learnedidx.bench.common import console, print_table


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep(
        keys: int = typer.Option(100_000, help="rows of the group being trained"),
        features: int = typer.Option(32, help="key features"),
        delta: float = typer.Option(0.01, help="delta ratio for the incremental column"),
        out: Path = typer.Option(Path("bench-out/sweep.png")),
    ) -> None:
        """Modelled full and incremental training time over units × inner PEs × clock."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from learnedidx.accel.config import DeviceConfig
        from learnedidx.accel.fpga import cycles_full, cycles_incremental

        n = features + 1
        rows = []
        series: dict = {}
        for units, pes, mhz in itertools.product((1, 2, 4, 8), (1, 3, 6), (150.0, 250.0, 400.0)):
            cfg = DeviceConfig(units=units, inner_pes=pes, clock_mhz=mhz, max_features=max(32, features))
            full = cycles_full(cfg, keys, n) / (mhz * 1e6) * 1e3
            inc = cycles_incremental(cfg, keys, n, int(keys * delta)) / (mhz * 1e6) * 1e3
            rows.append([units, pes, mhz, full, inc, full / inc])
            series.setdefault((pes, mhz), []).append((units, full))
        print_table(f"modelled time (ms), {keys:,} keys × {features} features, delta {delta:.0%}",
                    ["units", "inner PEs", "MHz", "full ms", "incremental ms", "full/incr"], rows)
        fig, ax = plt.subplots(figsize=(7, 4))
        for (pes, mhz), pts in sorted(series.items()):
            ax.plot([u for u, _ in pts], [t for _, t in pts], marker="o", label=f"{pes} PEs, {mhz:.0f} MHz")
        ax.set_xlabel("QR units")
        ax.set_ylabel("modelled full retrain (ms)")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=120)
        console.print(f"wrote {out}")
