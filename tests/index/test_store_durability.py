"""Durability: reopen, corrupt/truncated log tails, checkpoints, SIGKILL at random moments."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import learnedidx
from learnedidx.errors import CorruptLogError
from learnedidx.errors import LogRecoveryWarning, StoreLockedError
from learnedidx.index.durability import Durability


def _wal_files(path):
    return sorted(p for p in path.iterdir() if p.name.startswith("wal-"))


def test_reopen_after_close_keeps_everything(tmp_path):
    with learnedidx.open(tmp_path / "db", retrain="off", group_size=64) as db:
        for i in range(1000):
            db.put(f"k{i:04d}".encode(), str(i).encode())
        for i in range(0, 1000, 3):
            db.delete(f"k{i:04d}".encode())
    with learnedidx.open(tmp_path / "db", retrain="off") as db:
        assert len(db) == 1000 - len(range(0, 1000, 3))
        assert db.get(b"k0001") == b"1" and db.get(b"k0003") is None


def test_recovery_from_log_without_checkpoint(tmp_path):
    db = learnedidx.open(tmp_path / "db", retrain="off", sync="always")
    db.put_many([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    db.delete(b"b")
    db._dur.close()  # simulate a crash: no checkpoint on close
    db._closed = True
    with learnedidx.open(tmp_path / "db", retrain="off") as db2:
        assert list(db2.items()) == [(b"a", b"1"), (b"c", b"3")]


def test_apply_many_writes_are_logged_before_acknowledgement(tmp_path):
    with learnedidx.open(tmp_path / "db", retrain="off", group_size=64) as db:
        db.put_many([b"k%04d" % i for i in range(500)], [b"old"] * 500)
    db = learnedidx.open(tmp_path / "db", retrain="off", sync="always")
    got = db.apply_many([b"k0001", b"k0001", b"k0001", b"new", b"new", b"k0002"],
                        [None, b"upd", None, b"n", None, None])
    assert got == [b"old", None, b"upd", None, b"n", b"old"]
    db._dur.close()  # simulate a crash: no checkpoint on close
    db._closed = True
    with learnedidx.open(tmp_path / "db", retrain="off") as db2:
        assert db2.get(b"k0001") == b"upd" and db2.get(b"new") == b"n" and len(db2) == 501
    with learnedidx.open(tmp_path / "db", retrain="off") as db3:
        with pytest.raises(ValueError, match="2 keys but 1 values"):
            db3.apply_many([b"a", b"b"], [None])
        with pytest.raises(learnedidx.errors.KeyTypeError):
            db3.apply_many([b"a"], ["not bytes"])


@pytest.mark.parametrize("cut", [1, 5, 9, 13])
def test_truncated_tail_is_cut_with_warning(tmp_path, cut):
    d = Durability(tmp_path / "db")
    d.recover()
    for i in range(10):
        d.log_put(f"key{i}".encode(), b"v" * i)
    d.close()
    wal = _wal_files(tmp_path / "db")[-1]
    size = wal.stat().st_size
    with open(wal, "r+b") as f:
        f.truncate(size - cut)
    d2 = Durability(tmp_path / "db")
    with pytest.warns(LogRecoveryWarning):
        rec = d2.recover()
    assert [k for _, k, _ in rec.log] == [f"key{i}".encode() for i in range(9)]
    d2.log_put(b"after", b"x")  # the log is usable after the cut
    d2.close()
    d3 = Durability(tmp_path / "db")
    assert [k for _, k, _ in d3.recover().log][-1] == b"after"
    d3.close()


def test_flipped_byte_is_detected(tmp_path):
    with learnedidx.open(tmp_path / "db", retrain="off", sync="always") as db:
        pass
    d = Durability(tmp_path / "db")
    d.recover()
    d.log_put(b"good", b"1")
    d.log_put(b"bad", b"2")
    d.close()
    wal = _wal_files(tmp_path / "db")[-1]
    data = bytearray(wal.read_bytes())
    data[-1] ^= 0xFF
    wal.write_bytes(bytes(data))
    with pytest.warns(LogRecoveryWarning):
        db = learnedidx.open(tmp_path / "db", retrain="off")
    assert db.get(b"good") == b"1" and db.get(b"bad") is None
    db.close()


def test_corrupt_checkpoint_without_fallback_raises(tmp_path):
    with learnedidx.open(tmp_path / "db", retrain="off") as db:
        db.put(b"k", b"v")
    ck = [p for p in (tmp_path / "db").iterdir() if p.suffix == ".ckpt"][-1]
    data = bytearray(ck.read_bytes())
    data[-1] ^= 1
    ck.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError):
        learnedidx.open(tmp_path / "db")


def test_leftover_checkpoint_tmp_is_ignored(tmp_path):
    with learnedidx.open(tmp_path / "db", retrain="off") as db:
        db.put(b"k", b"v")
    (tmp_path / "db" / "checkpoint-000000000099.ckpt.tmp").write_bytes(b"half written")
    with learnedidx.open(tmp_path / "db") as db:
        assert db.get(b"k") == b"v"


def test_second_opener_is_refused(tmp_path):
    with learnedidx.open(tmp_path / "db"):
        with pytest.raises(StoreLockedError):
            learnedidx.open(tmp_path / "db")


CHILD = textwrap.dedent(
    """
    import sys, learnedidx
    db = learnedidx.open(sys.argv[1], sync="always", retrain="background", retrain_interval=0.01,
                         buffer_threshold=8, group_size=64, checkpoint_bytes=20000)
    start = int(sys.argv[2])
    for i in range(start, start + 100000):
        k = f"key{i:07d}".encode()
        if i % 5 == 4:
            db.put_many([k, k + b"b"], [b"v%d" % i, b"w"])
        else:
            db.put(k, b"v%d" % i)
        print(i, flush=True)
    """
)


def test_sigkill_at_random_moments_loses_no_acknowledged_write(tmp_path):
    path = tmp_path / "db"
    rng = random.Random(1234)
    acked: set[int] = set()
    next_i = 0
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(next_i)],
                                stdout=subprocess.PIPE, text=True)
        deadline = time.time() + rng.uniform(0.3, 1.5)
        seen = []
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(int(line))
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate()
        seen.extend(int(x) for x in rest.split())
        acked.update(seen)
        if seen:
            next_i = max(seen) + 1
        with learnedidx.open(path, retrain="off") as db:
            missing = [i for i in acked if db.get(f"key{i:07d}".encode()) != b"v%d" % i]
            assert not missing, f"lost acknowledged writes: {missing[:5]}"
            keys = list(db)
            assert keys == sorted(keys) and len(keys) == len(db)
    assert len(acked) > 100


def test_damage_in_an_earlier_segment_stops_replay_there(tmp_path):
    d = Durability(tmp_path / "db")
    d.recover()
    d.log_put(b"a", b"1")
    d.log_put(b"b", b"2")
    d.start_checkpoint()  # rotate; the crash comes before the checkpoint is written
    d.log_put(b"c", b"3")
    d.close()
    first, second = _wal_files(tmp_path / "db")
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF  # damage the record of b"b"
    first.write_bytes(bytes(data))
    d2 = Durability(tmp_path / "db")
    with pytest.warns(LogRecoveryWarning, match="set aside"):
        rec = d2.recover()
    # a consistent prefix of the history: "c" came after the hole, so it is not replayed
    assert [k for _, k, _ in rec.log] == [b"a"]
    assert (tmp_path / "db" / (second.name + ".damaged")).exists() and not second.exists()
    d2.close()
