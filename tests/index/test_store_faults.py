"""Disk faults under the write-ahead log (docs/store.md, When a write or sync fails): short
writes, ENOSPC and EIO from write and fsync, failed checkpoints, a power loss cutting the
log back to what was synced.  The faults come from tests/index/faults.py in place of
``learnedidx.index.fileio.ops``; everything else is the public API.
"""
from __future__ import annotations

import errno
import time

import pytest

import learnedidx
from learnedidx.errors import LogFailedError, LogRecoveryWarning, StoreClosedError, StoreIOError
from learnedidx.index import fileio
from tests.index.faults import FaultyOps
from tests.index.test_store_durability import crash


@pytest.fixture
def ops(monkeypatch):
    o = FaultyOps()
    monkeypatch.setattr(fileio, "ops", o)
    return o


def reopened(path, **opts) -> dict:
    with learnedidx.open(path, retrain="off", **opts) as db:
        return dict(db.items())


def test_short_writes_are_continued_until_the_record_is_whole(tmp_path, ops):
    """Every write takes at most 7 bytes: each record still reaches the log whole."""
    ops.fail("write", errno=None)
    db = learnedidx.open(tmp_path / "db", retrain="off")
    want = {}
    for i in range(200):
        db.put(b"k%03d" % i, b"v" * i)
        want[b"k%03d" % i] = b"v" * i
    db.put_many([b"a", b"b"], [b"1" * 100, b"2"])
    db.delete(b"k000")
    want |= {b"a": b"1" * 100, b"b": b"2"}
    del want[b"k000"]
    db.close()
    assert reopened(tmp_path / "db") == want


@pytest.mark.parametrize("call,code,partial", [("write", errno.ENOSPC, 0), ("write", errno.ENOSPC, 11),
                                               ("write", errno.EIO, 0), ("fdatasync", errno.EIO, 0)])
def test_a_failed_write_or_sync_fails_the_write_and_every_later_one_until_a_checkpoint(tmp_path, ops, call,
                                                                                      code, partial):
    path = tmp_path / "db"
    db = learnedidx.open(path, retrain="off")
    db.put_many([b"a", b"b"], [b"1", b"2"])
    ops.fail(call, errno=code, times=1, partial=partial)
    with pytest.raises(StoreIOError) as ei:
        db.put(b"a", b"new")
    assert ei.value.errno == code and not isinstance(ei.value, LogFailedError)
    assert db.get(b"a") == b"1"  # not applied
    # The disk answers again, but the log is not trusted: nothing more is acknowledged.
    for write in (lambda: db.put(b"c", b"3"), lambda: db.delete(b"b"), lambda: db.put_many([b"d"], [b"4"]),
                  lambda: db.apply_many([b"e", b"a"], [b"5", None])):
        with pytest.raises(LogFailedError, match="failed earlier"):
            write()
    assert dict(db.items()) == {b"a": b"1", b"b": b"2"}  # reads go on
    db.checkpoint()  # a checkpoint holds every applied write: the log is good again
    db.put(b"c", b"3")
    db.close()
    assert reopened(path) == {b"a": b"1", b"b": b"2", b"c": b"3"}


@pytest.mark.parametrize("call,partial", [("write", 11), ("fdatasync", 0)])
def test_after_a_failed_write_a_crash_keeps_every_acknowledged_write(tmp_path, call, partial):
    """The failed write may be in the log (torn: cut at reopen; whole: in doubt, replayed
    whole), every acknowledged one is."""
    path = tmp_path / "db"
    out = crash(path, f"""
        fileio.ops = ops = faults.FaultyOps()
        for i in range(100):
            db.put(b"k%03d" % i, b"v%d" % i)
        ops.fail({call!r}, errno=5, times=1, partial={partial})
        try:
            db.put(b"k050", b"failed")
        except learnedidx.errors.StoreIOError as exc:
            print("failed", exc.errno)
        try:
            db.put(b"k051", b"refused")
        except learnedidx.errors.LogFailedError:
            print("refused")
    """, retrain="off")
    assert out == ["failed", "5", "refused"]
    if call == "write":
        with pytest.warns(LogRecoveryWarning, match="torn log tail"):
            got = reopened(path)
    else:
        got = reopened(path)
    want = {b"k%03d" % i: b"v%d" % i for i in range(100)}
    assert got in (want, want | {b"k050": b"failed"})


def test_a_failed_background_sync_refuses_later_writes(tmp_path, ops):
    """sync="batch": the flusher's fdatasync fails; the next write is refused."""
    db = learnedidx.open(tmp_path / "db", retrain="off", sync="batch", sync_interval=0.001)
    db.put(b"a", b"1")
    ops.fail("fdatasync", errno=errno.EIO)
    db.put(b"b", b"2")  # acknowledged when written; the sync comes within sync_interval
    deadline = time.monotonic() + 10
    with pytest.raises(LogFailedError):
        while time.monotonic() < deadline:
            db.put(b"c", b"3")
            time.sleep(0.001)
    ops.clear()
    db.close()  # the closing checkpoint holds b and c: nothing acknowledged is lost
    assert reopened(tmp_path / "db") == {b"a": b"1", b"b": b"2", b"c": b"3"}


@pytest.mark.parametrize("call,pattern", [("open", "checkpoint-*.tmp"), ("write", "checkpoint-*.tmp"),
                                          ("fsync", "checkpoint-*.tmp"), ("replace", "checkpoint-*.ckpt")])
def test_a_failed_checkpoint_loses_nothing_and_the_log_goes_on(tmp_path, ops, call, pattern):
    path = tmp_path / "db"
    db = learnedidx.open(path, retrain="off", group_size=64)
    db.put_many([b"k%04d" % i for i in range(1000)], [b"v"] * 1000)
    ops.fail(call, pattern, errno=errno.ENOSPC, times=1)
    db.put(b"k0001", b"updated")
    with pytest.raises(StoreIOError) as ei:
        db.checkpoint()
    assert ei.value.errno == errno.ENOSPC
    assert not list(path.glob("*.tmp"))
    db.put(b"after", b"1")  # the log was not touched: writes go on
    db.close()
    got = reopened(path)
    assert len(got) == 1001 and got[b"k0001"] == b"updated" and got[b"after"] == b"1"


def test_close_on_a_failing_disk_raises_and_still_releases_the_store(tmp_path, ops):
    path = tmp_path / "db"
    db = learnedidx.open(path, retrain="off")
    db.put(b"a", b"1")
    ops.fail("open", "checkpoint-*.tmp", errno=errno.ENOSPC)
    with pytest.raises(StoreIOError):
        db.close()
    with pytest.raises(StoreClosedError):
        db.put(b"b", b"2")
    ops.clear()
    assert reopened(path) == {b"a": b"1"}  # the same process opens it again


@pytest.mark.parametrize("sync", ["always", "batch", "off"])
def test_a_power_loss_keeps_what_the_sync_policy_promises(tmp_path, sync):
    """The log cut back to the bytes synced (what a power loss leaves at worst), then a
    crash: with "always" every acknowledged write is there; with "batch" every write
    acknowledged before the flusher's last sync; with "off" every write acknowledged
    before the last checkpoint began."""
    path = tmp_path / "db"
    out = crash(path, f"""
        import time
        from pathlib import Path
        fileio.ops = ops = faults.FaultyOps()
        for i in range(300):
            db.put(b"k%03d" % i, b"v%d" % i)
        if {sync!r} == "off":
            db.checkpoint()
            for i in range(300, 350):
                db.put(b"k%03d" % i, b"v%d" % i)
        if {sync!r} == "batch":
            time.sleep(0.2)  # many intervals: the flusher synced everything
        sizes = [p.stat().st_size for p in Path(sys.argv[1]).glob("wal-*")]
        faults.power_loss(Path(sys.argv[1]), ops)
        print(sizes == [p.stat().st_size for p in Path(sys.argv[1]).glob("wal-*")])
    """, retrain="off", sync=sync, sync_interval=0.01)
    assert out == [str(sync != "off")]  # "off": the writes after the checkpoint were never synced
    assert reopened(path) == {b"k%03d" % i: b"v%d" % i for i in range(300)}


def test_sync_off_syncs_nothing_until_a_checkpoint(tmp_path, ops):
    db = learnedidx.open(tmp_path / "db", retrain="off", sync="off")
    for i in range(50):
        db.put(b"k%03d" % i, b"v")
    assert not [c for c in ops.calls if c[0] in ("fdatasync", "fsync") and c[1].startswith("wal-")]
    db.checkpoint()
    assert ("fdatasync", "wal-000000000000.log") in ops.calls  # the rotated segment is synced
    db.close()
