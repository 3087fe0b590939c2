"""``learnedidx bench retrain``: full vs SIA incremental retraining of one group."""
from __future__ import annotations

import numpy as np
import typer

from learnedidx.bench.common import best_of, parse_list, print_table
from learnedidx.index import kernels as K
from learnedidx.index.keys import KeyBatch
from learnedidx.index.training import get_backend


def group_features(n_keys: int, key_len: int, max_features: int, seed: int):
    """Sorted random keys of ``key_len`` bytes with a shared 4-byte prefix → (A, b, batch)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n_keys, key_len - 4), dtype=np.uint8)
    keys = sorted({b"grp/" + r.tobytes() for r in raw})
    kb = KeyBatch.from_keys(keys)
    prefix = int(K.common_prefix_len(kb.arena, kb.offsets, 0, len(keys)))
    feat = min(max_features, key_len - prefix)
    A = K.build_features(kb.arena, kb.offsets, 0, len(keys), prefix, feat)
    return A, np.arange(len(keys), dtype=np.float64)


def run(sizes: list[int], key_lens: list[int], deltas: list[float], max_features: int, trainer: str,
        repeat: int) -> list[list]:
    backend = get_backend(trainer)
    rows = []
    A0, b0 = group_features(256, 16, max_features, 0)  # warm-up compilation, not timed
    backend.train_incremental(backend.train_full(A0, b0).R, A0[:8], A0, b0)
    for n in sizes:
        for kl in key_lens:
            A, b = group_features(n, kl, max_features, n + kl)
            full = best_of(lambda: backend.train_full(A, b), repeat)
            t_np = best_of(lambda: np.linalg.qr(A, mode="r"), repeat)
            for d in deltas:
                m = max(1, int(len(b) * d))
                R_old = backend.train_full(A[:-m], b[:-m]).R
                inc = best_of(lambda: backend.train_incremental(R_old, A[-m:], A, b), repeat)
                rows.append([n, kl, A.shape[1] - 1, f"{d:.0%}", full * 1e3, inc * 1e3, full / inc, t_np * 1e3])
    return rows


def register(app: typer.Typer) -> None:
    @app.command("retrain")
    def retrain(
        sizes: str = typer.Option("10000,100000", help="group sizes (keys)"),
        key_lens: str = typer.Option("16,64,128", help="key lengths (bytes)"),
        deltas: str = typer.Option("0.01,0.05,0.1,0.5", help="delta ratios"),
        max_features: int = typer.Option(128, help="feature cap (the store's default is 32)"),
        trainer: str = typer.Option("cpu", help="training backend"),
        repeat: int = typer.Option(3),
        quick: bool = typer.Option(False, help="tiny sizes for a smoke run"),
    ) -> None:
        """Full vs incremental (SIA) retraining of one group; ratio = full / incremental."""
        if quick:
            sizes, key_lens, deltas, repeat = "2000", "16", "0.01,0.5", 1
        rows = run(parse_list(sizes), parse_list(key_lens), parse_list(deltas, float), max_features, trainer, repeat)
        print_table(f"retraining one group ({trainer} backend)",
                    ["keys", "key len", "features", "delta", "full ms", "incremental ms", "full/incr", "numpy qr ms"],
                    rows)
