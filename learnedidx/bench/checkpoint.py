"""``learnedidx bench checkpoint``: how long a checkpoint takes, and how long writers wait
for it.

A checkpoint pins an image of the store under the writer lock, then writes it while
writers go on (copying a group the image still reads before their first write to it).  A
writer thread updates existing keys (values of changing lengths) and inserts new ones
without pause, each put timed, while the main thread takes checkpoints; the table shows
the writer's longest and 99th-percentile put during checkpoints beside the same writer's
without one, and the checkpoint's own time."""
from __future__ import annotations

import tempfile
import threading
import time

import numpy as np
import typer

from learnedidx.bench.common import console, parse_list, print_table
from learnedidx.workloads.generators import key_names


def measure(n: int, directory: str, sync: str, rounds: int = 3) -> dict:
    """One store of ``n`` keys in ``directory`` (see the module docstring)."""
    import learnedidx

    keys = key_names(np.random.default_rng(1).permutation(n))
    value = b"v" * 100
    with learnedidx.open(directory, sync=sync, retrain="background", checkpoint_bytes=1 << 62) as db:
        db.put_many(keys, [value] * n)
        db.checkpoint()
        stop = threading.Event()
        phase = ["idle"]
        lat: dict[str, list] = {"idle": [], "checkpoint": []}

        def writer() -> None:
            rng = np.random.default_rng(2)
            i = 0
            while not stop.is_set():
                k = keys[int(rng.integers(n))] if i % 2 else b"new-%012d" % i
                v = value[:int(rng.integers(50, 100))]
                t0 = time.perf_counter()
                db.put(k, v)
                lat[phase[0]].append(time.perf_counter() - t0)
                i += 1

        t = threading.Thread(target=writer)
        t.start()
        took = []
        try:
            for _ in range(rounds):
                time.sleep(0.5)
                phase[0] = "checkpoint"
                t0 = time.perf_counter()
                db.checkpoint()
                took.append(time.perf_counter() - t0)
                phase[0] = "idle"
            time.sleep(0.5)
        finally:
            stop.set()
            t.join()
    ck, idle = np.array(lat["checkpoint"]) * 1e3, np.array(lat["idle"]) * 1e3
    return {"keys": n, "checkpoint_s": float(np.median(took)), "puts_during": len(ck),
            "max_ms": float(ck.max()), "p99_ms": float(np.percentile(ck, 99)),
            "idle_max_ms": float(idle.max()), "idle_p99_ms": float(np.percentile(idle, 99))}


def register(app: typer.Typer) -> None:
    @app.command("checkpoint")
    def checkpoint(
        keys: str = typer.Option("1000000,10000000", help="store sizes"),
        sync: str = typer.Option("batch", help="the store's sync policy"),
        directory: str = typer.Option("/dev/shm", help="where the stores go (tmpfs by default: the disk's own "
                                                       "latency is not the checkpoint's)"),
        rounds: int = typer.Option(3, help="checkpoints per store"),
    ) -> None:
        """Checkpoint time, and a concurrent writer's longest put during checkpoints."""
        rows = []
        for n in parse_list(keys):
            with tempfile.TemporaryDirectory(dir=directory) as d, console.status(f"{n:,} keys"):
                r = measure(n, d + "/db", sync, rounds)
            rows.append([r["keys"], r["checkpoint_s"], r["puts_during"], r["max_ms"], r["p99_ms"],
                         r["idle_max_ms"], r["idle_p99_ms"]])
        print_table(f"checkpoints beside a writer (sync={sync})",
                    ["keys", "checkpoint s (median)", "puts during", "longest put ms", "p99 put ms",
                     "longest put without ms", "p99 without ms"], rows)
