"""The crash campaign: a child process writes to a durable store through the public API and
is killed with SIGKILL at a random moment, again and again; each new child first dumps the
store as it reopened it, and the parent checks the dump against an oracle.

Every round's operations (put, put_many, apply_many, delete, get; values whose lengths
change from one write of a key to the next) come from a seed, so the parent knows them
without being told: the child reports only ``S n`` before operation ``n`` and ``A n
<result>`` once it returned.  After a kill, the reopened store must hold exactly the
acknowledged operations, plus possibly the one that was in flight (started, not
acknowledged) applied entirely; results of reads and deletes must match the oracle too.
Store options change from round to round: every sync policy, background or inline merges
at short intervals, small groups and buffers, checkpoints every few KiB.  A quarter of the
kills aim at the child's open (recovery of what the previous child left).

``learnedidx store crash-test`` runs it; tests/index/test_crash_campaign.py runs a few
dozen rounds in CI and hundreds when marked slow.
"""
from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

#: Keys: two families, short numbered ones and longer ones sharing prefixes.
N_KEYS = 2500
MAX_KEY_LEN = 64


def _key(rng: random.Random) -> bytes:
    i = rng.randrange(N_KEYS)
    return b"k%05d" % i if i % 3 else b"user/%04d/profile/%d" % (i // 7, i % 7)


@dataclass(frozen=True)
class Op:
    kind: str  # put | put_many | apply_many | delete | get
    keys: tuple[bytes, ...]
    values: tuple[bytes | None, ...]  # None: a read (apply_many, get, delete)


def round_options(seed: int, rnd: int) -> dict:
    """The store options of round ``rnd``."""
    rng = random.Random(f"{seed}/{rnd}/options")
    retrain = rng.choice(["background", "background", "inline"])
    return {"sync": rng.choice(["always", "batch", "off"]), "sync_interval": rng.choice([0.001, 0.005]),
            "retrain": retrain, "retrain_interval": rng.choice([0.002, 0.01, 0.05]),
            "buffer_threshold": rng.choice([4, 16, 64]), "group_size": rng.choice([16, 64, 256]),
            "checkpoint_bytes": rng.choice([4 << 10, 32 << 10, 256 << 10]), "max_key_len": MAX_KEY_LEN}


def operations(seed: int, rnd: int) -> Iterator[Op]:
    """The operations of round ``rnd``, without end."""
    rng = random.Random(f"{seed}/{rnd}/ops")
    n = 0

    def value(k: bytes) -> bytes:
        r = rng.random()
        size = (rng.randrange(16) if r < 0.5 else rng.randrange(16, 256) if r < 0.85
                else rng.randrange(256, 4096) if r < 0.98 else rng.randrange(16384, 65536))
        head = b"%s|%d.%d|" % (k, rnd, n)
        return (head + b"x" * size)[:max(size, len(head))]

    if rng.random() < 0.3:  # a large batch first: a bulk load when the store is empty
        keys = [_key(rng) for _ in range(rng.randrange(300, 2000))]
        yield Op("put_many", tuple(keys), tuple(value(k) for k in keys))
        n += 1
    while True:
        r = rng.random()
        if r < 0.4:
            k = _key(rng)
            op = Op("put", (k,), (value(k),))
        elif r < 0.55:
            keys = [_key(rng) for _ in range(rng.randrange(2, 50))]
            op = Op("put_many", tuple(keys), tuple(value(k) for k in keys))
        elif r < 0.7:
            keys = [_key(rng) for _ in range(rng.randrange(2, 40))]
            op = Op("apply_many", tuple(keys), tuple(None if rng.random() < 0.5 else value(k) for k in keys))
        elif r < 0.9:
            op = Op("delete", (_key(rng),), (None,))
        else:
            op = Op("get", (_key(rng),), (None,))
        yield op
        n += 1


def apply(state: dict, op: Op) -> object:
    """``op`` applied to the oracle ``state`` (a dict); what the store answers."""
    if op.kind == "put":
        state[op.keys[0]] = op.values[0]
        return None
    if op.kind == "put_many":
        state.update(zip(op.keys, op.values))
        return None
    if op.kind == "delete":
        return state.pop(op.keys[0], None) is not None
    if op.kind == "get":
        return state.get(op.keys[0])
    out = []
    for k, v in zip(op.keys, op.values):
        out.append(state.get(k) if v is None else None)
        if v is not None:
            state[k] = v
    return out


def digest(result: object) -> str:
    return "%08x" % zlib.crc32(repr(result).encode())


def child(directory: str, seed: int, rnd: int, limit: int) -> None:
    """One round's writer (runs in the child process); see the module docstring."""
    import learnedidx
    import learnedidx.index.store  # noqa: F401 - imported before "I": the open that follows is recovery

    out = sys.stdout
    out.write("I\n")
    out.flush()
    db = learnedidx.open(directory, **round_options(seed, rnd))
    out.write("O\n")
    items = list(db.items())
    for k, v in items:
        out.write(f"P {k.hex()} {v.hex()}\n")
    out.write(f"E {len(items)} {len(db)}\n")
    out.flush()
    for n, op in zip(range(limit), operations(seed, rnd)):
        out.write(f"S {n}\n")
        out.flush()
        if op.kind == "put":
            res = db.put(op.keys[0], op.values[0])
        elif op.kind == "put_many":
            res = db.put_many(list(op.keys), list(op.values))
        elif op.kind == "apply_many":
            res = db.apply_many(list(op.keys), list(op.values))
        elif op.kind == "delete":
            res = db.delete(op.keys[0])
        else:
            res = db.get(op.keys[0])
        out.write(f"A {n} {digest(res)}\n")
        out.flush()
    db.close()
    out.write("C\n")
    out.flush()


CHILD = "import sys; from learnedidx.workloads.crash import child; child(sys.argv[1], *map(int, sys.argv[2:]))"


@dataclass
class Report:
    rounds: int = 0
    killed_in_open: int = 0  # killed after starting to open the store, before it was open
    killed_in_ops: int = 0
    finished: int = 0  # the child ran out of operations and closed the store
    checks: int = 0  # reopened states compared with the oracle
    acknowledged: int = 0
    in_doubt_applied: int = 0  # operations in flight at a kill, found applied
    lost: int = 0  # acknowledged writes missing or with an older value
    wrong: int = 0  # values that are no write's, keys that were deleted, reads that differ
    half_applied: int = 0  # operations in flight found partly applied
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.wrong or self.half_applied or self.failures)


def _compare(got: dict, state: dict, pending: Op | None, report: Report, where: str) -> dict:
    """Check a reopened store's items against the oracle; the oracle to go on with."""
    if got == state:
        return state
    if pending is not None:
        after = dict(state)
        apply(after, pending)
        if got == after:
            report.in_doubt_applied += 1
            return after
    touched = set(pending.keys) if pending is not None else set()
    bad = []
    for k in sorted(set(got) | set(state)):
        if k in touched:
            continue
        if got.get(k) != state.get(k):
            if k in state and (k not in got or not got[k].startswith(k + b"|")):
                report.lost += 1
            else:
                report.wrong += 1
            bad.append(k)
    if touched and not bad:
        report.half_applied += 1
        bad = sorted(touched)
    report.failures.append(f"{where}: {len(bad)} keys differ from the oracle, e.g. {bad[:3]}")
    return got


def _warm_up(seed: int) -> None:
    """One round to its end, in a scratch directory, and a reopen: the kernels every round
    uses are compiled and cached, not compiled again by each child until it is killed."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="learnedidx-crash-warm-") as d:
        for rnd in (0, 1):
            subprocess.run([sys.executable, "-c", CHILD, d, str(seed), str(rnd), "500"], check=True,
                           capture_output=True, timeout=600)


def run(directory: str | Path, rounds: int, seed: int = 0, ops_per_round: int = 20000,
        run_seconds: float = 1.5, open_fraction: float = 0.25,
        progress: Callable[[int, Report], None] | None = None) -> Report:
    """``rounds`` rounds against the store at ``directory`` (created if needed)."""
    t_start = time.perf_counter()
    _warm_up(seed)
    report = Report()
    state: dict = {}
    pending: Op | None = None
    open_time = 0.05  # how long opening takes, learnt as rounds go
    directory = str(directory)
    for rnd in range(rounds):
        rng = random.Random(f"{seed}/{rnd}/kill")
        aim_open = rng.random() < open_fraction
        limit = ops_per_round if rng.random() < 0.8 else rng.randrange(1, 200)  # some rounds close the store
        proc = subprocess.Popen([sys.executable, "-c", CHILD, directory, str(seed), str(rnd), str(limit)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[tuple[float, str]] = []
        marks = {"I": threading.Event(), "O": threading.Event(), "E": threading.Event()}

        def read(p: subprocess.Popen = proc, lines: list = lines, marks: dict = marks) -> None:
            for line in p.stdout:
                lines.append((time.perf_counter(), line))
                ev = marks.get(line[:1])
                if ev is not None:
                    ev.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        if aim_open:
            marks["I"].wait(120)
            time.sleep(rng.uniform(0, 1.5 * open_time))
        else:
            marks["E"].wait(120)
            time.sleep(rng.uniform(0, run_seconds))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join()
        err = proc.stderr.read()
        proc.stderr.close()
        report.rounds += 1
        if proc.returncode not in (0, -signal.SIGKILL):
            report.failures.append(f"round {rnd}: the child failed ({proc.returncode}): {err[-1500:]}")
            break
        got: dict = {}
        tags = [ln[:1] for _, ln in lines]
        if "O" in tags and "I" in tags:
            t_i = next(t for t, ln in lines if ln[0] == "I")
            t_o = next(t for t, ln in lines if ln[0] == "O")
            open_time = 0.8 * open_time + 0.2 * (t_o - t_i)
        if "O" not in tags:
            report.killed_in_open += "I" in tags
            if progress:
                progress(rnd, report)
            continue  # nothing happened to the store but (part of) a recovery
        if "E" in tags:
            for _, ln in lines:
                if ln[0] == "P":
                    _, k, v = ln.split()
                    got[bytes.fromhex(k)] = bytes.fromhex(v)
                elif ln[0] == "E":
                    _, n_items, n_len = ln.split()
                    if int(n_items) != len(got) or int(n_len) != len(got):
                        report.failures.append(f"round {rnd}: {n_items} items, len() {n_len}, "
                                               f"{len(got)} distinct keys")
            keys = [bytes.fromhex(ln.split()[1]) for _, ln in lines if ln[0] == "P"]
            if keys != sorted(set(keys)):
                report.failures.append(f"round {rnd}: items() not in strictly increasing key order")
            state = _compare(got, state, pending, report, f"round {rnd} (reopened)")
            report.checks += 1
            pending = None
        ops = operations(seed, rnd)
        current: Op | None = None
        for _, ln in lines:
            if ln[0] == "S":
                current = next(ops)
            elif ln[0] == "A":
                _, n, dig = ln.split()
                res = apply(state, current)
                report.acknowledged += 1
                if digest(res) != dig:
                    report.wrong += 1
                    report.failures.append(f"round {rnd}: operation {n} ({current.kind}) answered "
                                           f"differently from the oracle")
                current = None
        if current is not None:
            pending = current
        if "C" in tags:
            report.finished += 1
        else:
            report.killed_in_ops += 1
        if progress:
            progress(rnd, report)
        if report.failures:
            break
    if not report.failures:  # the last state, by an orderly open in this process
        import learnedidx

        with learnedidx.open(directory, max_key_len=MAX_KEY_LEN) as db:
            got = dict(db.items())
        _compare(got, state, pending, report, "final open")
        report.checks += 1
    report.seconds = time.perf_counter() - t_start
    return report
