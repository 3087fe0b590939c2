"""A store and ``fork()``: the child's copy refuses every use with StoreForkedError and never
touches the parent's files or locks (docs/store.md, Thread safety)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import learnedidx

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork() semantics of Linux")


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          timeout=240)


_PARENT_CRASHES = """
    import os, signal, sys
    import learnedidx
    from learnedidx.errors import StoreForkedError
    db = learnedidx.open(sys.argv[1], sync="always", retrain="background", group_size=64, buffer_threshold=8)
    for i in range(100):
        db.put(b"p%03d" % i, b"parent")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every use refused, close() and collection leave the files alone
        refused = 0
        for op in (lambda: db.put(b"c", b"child"), lambda: db.get(b"p000"), lambda: db.delete(b"p001"),
                   lambda: db.put_many([b"c1"], [b"x"]), lambda: len(db), lambda: db.checkpoint(),
                   lambda: db.retrain_now(), lambda: list(db.items()), lambda: db.scan(b"p", 3),
                   lambda: db.get_many([b"p002"]), lambda: db.stats(), lambda: db.__enter__()):
            try:
                op()
            except StoreForkedError:
                refused += 1
        db.close()
        del db
        import gc; gc.collect()
        os.write(w, b"%d" % refused)
        os._exit(0)
    os.waitpid(pid, 0)
    print("refused", os.read(r, 16).decode(), flush=True)
    for i in range(100, 200):  # the log the child must not have retired
        db.put(b"p%03d" % i, b"parent")
    os.kill(os.getpid(), signal.SIGKILL)  # a crash: no close, no checkpoint
"""


def test_a_forked_child_refuses_the_store_and_leaves_the_parents_log_alone(tmp_path):
    """Once, a child's close() checkpointed its copy and deleted the segment the parent was
    still appending to: after the parent crashed, half its acknowledged writes were gone."""
    done = _run(_PARENT_CRASHES, str(tmp_path / "db"))
    assert done.returncode == -9, done.stderr
    assert "refused 12" in done.stdout, (done.stdout, done.stderr)
    with learnedidx.open(tmp_path / "db") as db:
        assert dict(db.items()) == {b"p%03d" % i: b"parent" for i in range(200)}


_FORK_WHILE_TRAINING = """
    import os, sys, threading, signal
    import learnedidx
    from learnedidx.errors import StoreForkedError
    from learnedidx.index.qr import CpuBackend
    from learnedidx.index.training import register_backend

    inside, release = threading.Event(), threading.Event()

    class Slow:
        name = "slow"
        def __init__(self):
            self.cpu = CpuBackend()
        def train_full(self, A, b):
            if threading.current_thread().name == "learnedidx-retrainer":
                inside.set()
                release.wait(60)
            return self.cpu.train_full(A, b)
        def train_incremental(self, R_old, A_delta, A, b):
            return self.train_full(A, b)

    register_backend("slow", Slow)
    db = learnedidx.open(None, retrain="background", group_size=64, buffer_threshold=8, retrain_after=0,
                         trainer="slow")
    for i in range(400):
        db.put(b"k%04d" % i, b"v")
    assert inside.wait(60), "the background thread never trained"
    pid = os.fork()  # the retrainer thread holds the training lock in the parent
    if pid == 0:
        signal.alarm(30)  # a hang is a failure, not a stuck test
        out = []
        for op in (db.retrain_now, lambda: db.put(b"x", b"y"), db.checkpoint, db.close):
            try:
                op()
                out.append("ok")
            except StoreForkedError:
                out.append("refused")
        os.write(1, (" ".join(out) + "\\n").encode())
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    release.set()
    db.retrain_now()
    assert db.get_many([b"k%04d" % i for i in range(400)]) == [b"v"] * 400
    db.close()
    print("child status", status, flush=True)
"""


def test_a_child_forked_while_the_retrainer_trains_does_not_hang():
    done = _run(_FORK_WHILE_TRAINING)
    assert done.returncode == 0, done.stderr
    assert "refused refused refused ok" in done.stdout and "child status 0" in done.stdout, done.stdout


def test_a_store_opened_in_the_child_works(tmp_path):
    """The child may open stores of its own; only the parent's copies are refused."""
    script = """
        import os, sys
        import learnedidx
        parent = learnedidx.open(None)
        parent.put(b"a", b"1")
        pid = os.fork()
        if pid == 0:
            with learnedidx.open(sys.argv[1]) as mine:
                mine.put(b"b", b"2")
                ok = mine.get(b"b") == b"2"
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert parent.get(b"a") == b"1"
        print("child", os.waitstatus_to_exitcode(status))
    """
    done = _run(script, str(tmp_path / "own"))
    assert done.returncode == 0 and "child 0" in done.stdout, (done.stdout, done.stderr)
    with learnedidx.open(tmp_path / "own") as db:
        assert db.get(b"b") == b"2"
