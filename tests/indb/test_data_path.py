"""The data path: one pass over the caller's stream, computing while it arrives, gives the model
that training on the same rows in memory gives.

Oracles: the engine on arrays in memory (``runtime.train``, the rows read with a plain SELECT
in the table's physical order, which is the order pages stream in), least squares by numpy
and scikit-learn's unpenalized logistic regression (MADlib's linregr and IRLS definitions).
"""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from learnedidx.indb import runtime
from tests.indb.conftest import load

pytestmark = pytest.mark.postgres

RNG = np.random.default_rng(21)
N = 30_000  # about 200 pages: many slots, decoded by both workers


def _rows(db, table: str) -> tuple[np.ndarray, np.ndarray]:
    rows = db.execute(f"SELECT y, features FROM {table} WHERE y IS NOT NULL AND features IS NOT NULL").fetchall()
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


def _passes(db, model: str) -> int:
    return db.execute(f"SELECT (timings->>'passes')::int FROM {model}_summary").fetchone()[0]


@pytest.fixture
def tables(db):
    X = RNG.normal(size=(N, 6))
    load(db, "lin", X, X @ RNG.normal(size=6) + 0.5 + RNG.normal(size=N))
    load(db, "cls", X, (RNG.random(N) < 1 / (1 + np.exp(-(X @ RNG.normal(size=6) - 0.2)))).astype(float))
    return db


CALLS = [
    ("linregr", "learnedidx.linregr_train('lin', '{m}', 'y', 'features')", "lin", {}),
    ("logregr", "learnedidx.logregr_train('cls', '{m}', 'y', 'features', max_iter => 1)", "cls", {"max_iter": 1}),
    ("logregr", "learnedidx.logregr_train('cls', '{m}', 'y', 'features', max_iter => 30, tolerance => 1e-8)", "cls",
     {"max_iter": 30, "tolerance": 1e-8}),
    ("svm", "learnedidx.svm_train('cls', '{m}', 'y', 'features', max_iter => 3)", "cls", {"max_iter": 3}),
]


@pytest.mark.parametrize("reader", ["pages", "query"])
@pytest.mark.parametrize("algorithm,call,table,params", CALLS)
def test_streamed_training_equals_training_in_memory(tables, reader, algorithm, call, table, params):
    tables.execute(f"SET learnedidx.reader = '{reader}'")
    tables.execute("SET learnedidx.threads = 2")  # SGD's partitions follow the threads
    coef, loss, iterations = tables.execute(
        f"SELECT coef, loss, num_iterations FROM {call.format(m='model')}").fetchone()
    y, X = _rows(tables, table)
    want = runtime.train(algorithm, {"X": X, "y": y}, params, threads=2)
    np.testing.assert_allclose(coef, want.model["coef"], rtol=1e-9, atol=1e-12)
    if algorithm != "svm":  # svm reports MADlib's objective (tests/indb/test_madlib.py)
        assert loss == pytest.approx(want.loss, rel=1e-9)
    assert iterations == want.iterations


def test_linregr_is_one_pass_and_least_squares(tables):
    coef, loss = tables.execute("SELECT coef, loss FROM learnedidx.linregr_train('lin', 'm', 'y', 'features')").fetchone()
    assert _passes(tables, "m") == 1  # its loss comes from the sums: no pass for it
    y, X = _rows(tables, "lin")
    Xi = np.c_[np.ones(len(X)), X]
    c = np.linalg.lstsq(Xi, y, rcond=None)[0]
    np.testing.assert_allclose(coef, c, rtol=1e-9)
    assert loss == pytest.approx(np.mean((y - Xi @ c) ** 2), rel=1e-9)


def test_logregr_to_convergence_is_irls_and_reads_the_stream_once(tables):
    coef = tables.execute("SELECT coef FROM learnedidx.logregr_train('cls', 'm', 'y', 'features', "
                          "max_iter => 30, tolerance => 1e-8)").fetchone()[0]
    assert _passes(tables, "m") == 1  # later iterations read the rows kept in memory
    y, X = _rows(tables, "cls")
    sk = LogisticRegression(C=np.inf, tol=1e-12, max_iter=100000).fit(X, y)
    np.testing.assert_allclose(coef, np.r_[sk.intercept_, sk.coef_[0]], rtol=1e-6, atol=1e-8)


def test_nulls_leave_no_holes_and_a_leading_ones_column_is_the_intercept(db):
    """Rows with a NULL are skipped where they fall in a slot (the rows kept in memory close
    the holes), and features that start with a column of ones get no second intercept."""
    X = np.c_[np.ones(N), RNG.normal(size=(N, 3))]
    y = X @ [0.7, 1.0, -2.0, 0.5] + RNG.normal(size=N)
    load(db, "ones", X, y)
    db.execute("ALTER TABLE ones ADD COLUMN c float8")
    db.execute("UPDATE ones SET c = (y > 0)::int")
    db.execute("UPDATE ones SET y = NULL, c = NULL WHERE id % 7 = 0")
    db.execute("UPDATE ones SET features = NULL WHERE id % 11 = 0")
    db.execute("UPDATE ones SET features[2] = NULL WHERE id % 13 = 0")
    db.execute("VACUUM ones")
    for algorithm, dep, params in (("linregr", "y", {}), ("logregr", "c", {"max_iter": 4})):
        m = f"m_{algorithm}"
        coef, used, skipped, = db.execute(
            f"SELECT coef, num_rows_processed, num_rows_skipped FROM learnedidx.{algorithm}_train('ones', '{m}', "
            f"'{dep}', 'features'{', max_iter => 4' if params else ''})").fetchone()
        assert db.execute(f"SELECT read_path FROM {m}_summary").fetchone() == ("pages",)
        rows = db.execute(f"SELECT {dep}, features FROM ones WHERE y IS NOT NULL AND features IS NOT NULL "
                          "AND array_position(features, NULL) IS NULL").fetchall()
        yy, XX = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        assert (used, skipped) == (len(yy), N - len(yy))
        want = runtime.train(algorithm, {"X": XX, "y": yy}, params)
        assert len(coef) == 4  # the ones column is the intercept
        np.testing.assert_allclose(coef, want.model["coef"], rtol=1e-9)


class FakeServer:
    """A process that answers on the server's socket as the server's OS user and, instead of
    serving a call, sends ``frames`` (payload, flags, descriptor or None) after the request."""

    def __init__(self, path: str, frames: list) -> None:
        import socket
        import threading

        self.frames = frames
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import socket

        from learnedidx.server import protocol as P
        conn, _ = self.listener.accept()
        with conn:
            conn.sendall(P.encode(P.HELLO))
            P.read_frame(conn)
            for payload, flags, fd in self.frames:
                frame = P.encode_binary(flags, payload)
                if fd is None:
                    conn.sendall(frame)
                else:
                    socket.send_fds(conn, [frame], [fd])
            conn.settimeout(10)
            while conn.recv(1 << 16):  # until the backend gives up on us
                pass

    def close(self) -> None:
        self.listener.close()
        self.thread.join(10)


def _memfd(size: int, seal: bool) -> int:
    import fcntl
    import os

    fd = os.memfd_create("fake-ring", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def _ring_cases(tmp_path):
    from learnedidx.server import protocol as P
    from learnedidx.server import stream as S
    ring = S.RING.pack(b"M", S.RING_SLOTS, S.SLOT_BYTES, bytes(16))
    size = S.RING_SLOTS * S.SLOT_BYTES
    import os
    plain = tmp_path / "plain"
    plain.touch()
    os.truncate(plain, size)
    return {
        "unsealed": ([(ring, P.CONTROL, _memfd(size, False))], "not sealed against shrinking"),
        "a file, not a memfd": ([(ring, P.CONTROL, os.open(plain, os.O_RDWR))], "not sealed against shrinking"),
        "smaller than it says": ([(ring, P.CONTROL, _memfd(size // 2, True))], "smaller than the ring"),
        "no memory": ([(ring, P.CONTROL, None)], "without its memory"),
        "huge slots": ([(S.RING.pack(b"M", 4, 1 << 30, bytes(16)), P.CONTROL, _memfd(size, True))], "unsupported shape"),
        "data before a ring": ([(S.CONTROL.pack(b"S", 0, 1), P.CONTROL, None)], "without a ring"),
        "a slot it never filled": ([(ring, P.CONTROL, _memfd(size, True)), (S.FREE.pack(b"F", 3), P.CONTROL, None)],
                                   "freed a slot it did not hold"),
    }


@pytest.mark.parametrize("case", ["unsealed", "a file, not a memfd", "smaller than it says", "no memory",
                                  "huge slots", "data before a ring", "a slot it never filled"])
def test_a_ring_the_backend_cannot_trust_is_refused_and_the_session_lives_on(db, tmp_path, case):
    """Whatever a process answering on the socket sends, the backend maps only a sealed memfd
    as large as the ring it describes, writes only slots it holds, and fails the call with
    08P01 (the peer broke the protocol), never the backend: the session goes on."""
    import psycopg
    db.execute("CREATE TABLE small (y float8, features float8[])")
    db.execute("INSERT INTO small SELECT i, ARRAY[i, 1] FROM generate_series(1, 100) i")
    frames, message = _ring_cases(tmp_path)[case]
    fake = FakeServer(str(tmp_path / "fake.sock"), frames)
    try:
        db.execute("SELECT set_config('learnedidx.socket', %s, false)", (str(tmp_path / "fake.sock"),))
        with pytest.raises(psycopg.errors.ProtocolViolation, match=message):
            db.execute("SELECT * FROM learnedidx.linregr_train('small', 'm', 'y', 'features')")
        assert db.execute("SELECT count(*) FROM small").fetchone() == (100,)
    finally:
        fake.close()
