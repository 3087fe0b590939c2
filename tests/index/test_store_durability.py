"""Durability (docs/store.md, Durability and Damaged files): reopening, crashes, torn tails,
damage inside the log, missing files, checkpoints that do not add up, what the files depend
on, private files, and the lock of a failed open.

Crashes are real: a child process writes through the public API and is SIGKILLed.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

import learnedidx
from learnedidx.errors import (ConfigError, CorruptLogError, LogRecoveryWarning, RecordTooLargeError,
                               StoreClosedError, StoreIOError, StoreLockedError)

ROOT = Path(__file__).resolve().parents[2]


def crash(path: Path, code: str, **opts) -> list[str]:
    """Run ``code`` in a child process with ``db`` open at ``path`` (``opts``), then SIGKILL
    it: a crash without close().  ``faults`` (tests/index/faults.py) and ``fileio`` are at
    hand.  Returns what the child printed, split."""
    seams = "from learnedidx.index import fileio\nfrom tests.index import faults\n" if "faults" in code else ""
    script = (f"import os, signal, sys\nsys.path.insert(0, {str(ROOT)!r})\nimport learnedidx\n{seams}"
              f"db = learnedidx.open(sys.argv[1], **{opts!r})\n{textwrap.dedent(code)}\n"
              f"sys.stdout.flush()\nos.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return proc.stdout.split()


def files(d: Path) -> dict:
    """Every file under ``d`` with its bytes and mode: to check that nothing changed."""
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else None, p.stat().st_mode)
            for p in sorted(d.rglob("*"))}


def segments(d: Path) -> list[Path]:
    return sorted(d.glob("wal-*.log"))


def K(i: int) -> bytes:
    return b"k%04d" % i


def V(i: int) -> bytes:
    return b"v%04d" % i


REC = 9 + 4 + 5 + 5  # a PUT record of K(i), V(i): header, key length, key, value
WRITE_1000 = "for i in range(1000):\n    db.put(b'k%04d' % i, b'v%04d' % i)"


@pytest.fixture
def log1000(tmp_path):
    """A store whose log holds 1000 PUT records (no checkpoint): K(i) -> V(i)."""
    path = tmp_path / "db"
    crash(path, WRITE_1000, retrain="off")
    (seg,) = segments(path)
    assert seg.stat().st_size == 1000 * REC
    return path, seg


def flip(path: Path, offset: int, mask: int = 0x10) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def test_reopen_after_close_keeps_everything(tmp_path):
    with learnedidx.open(tmp_path / "db", retrain="off", group_size=64) as db:
        for i in range(1000):
            db.put(K(i), V(i))
        for i in range(0, 1000, 3):
            db.delete(K(i))
    with learnedidx.open(tmp_path / "db", retrain="off") as db:
        assert dict(db.items()) == {K(i): V(i) for i in range(1000) if i % 3}


def test_a_crash_keeps_every_acknowledged_write_of_every_kind(tmp_path):
    path = tmp_path / "db"
    with learnedidx.open(path, retrain="off", group_size=64) as db:
        db.put_many([K(i) for i in range(500)], [b"old"] * 500)
    out = crash(path, """
        db.put_many([b"a", b"b", b"c"], [b"1", b"2", b"3"])
        db.delete(b"b")
        print(db.apply_many([b"k0001", b"k0001", b"k0001", b"new", b"new", b"k0002"],
                            [None, b"upd" * 50, None, b"n", None, None])[2].decode())
        db.put(b"k0003", b"")
    """, retrain="off")
    assert out == ["upd" * 50]
    with learnedidx.open(path, retrain="off") as db:
        want = {K(i): b"old" for i in range(500)} | {b"a": b"1", b"c": b"3", b"k0001": b"upd" * 50, b"new": b"n",
                                                        b"k0003": b""}
        assert dict(db.items()) == want and len(db) == len(want)


@pytest.mark.parametrize("cut", [1, 5, 9, REC - 1])
def test_a_torn_last_record_is_cut_with_a_warning_and_the_log_goes_on(log1000, cut):
    path, seg = log1000
    with open(seg, "r+b") as f:
        f.truncate(1000 * REC - cut)
    with pytest.warns(LogRecoveryWarning, match=f"log tail of {seg.name} at byte {999 * REC}"):
        db = learnedidx.open(path, retrain="off")
    with db:
        assert dict(db.items()) == {K(i): V(i) for i in range(999)}
    crash(path, "db.put(b'after', b'x')", retrain="off")  # the log is usable after the cut
    with learnedidx.open(path, retrain="off") as db:
        assert db.get(b"after") == b"x" and len(db) == 1000


@pytest.mark.parametrize("tail", [b"\0" * 4096, bytes(range(256)) * 3], ids=["zeros", "garbage"])
def test_junk_after_the_last_record_is_a_torn_tail(log1000, tail):
    """What a crash can leave after the last write: a file extended with zeros or stale bytes."""
    path, seg = log1000
    with open(seg, "ab") as f:
        f.write(tail)
    with pytest.warns(LogRecoveryWarning, match="log tail"):
        db = learnedidx.open(path, retrain="off")
    with db:
        assert dict(db.items()) == {K(i): V(i) for i in range(1000)}


@pytest.mark.parametrize("where", ["value", "length", "crc", "op"])
def test_damage_inside_the_log_is_refused_naming_file_and_offset_and_nothing_changes(log1000, where):
    """One flipped bit in record 10 of 1000: not a torn tail, since 989 valid records follow."""
    path, seg = log1000
    at = 10 * REC
    flip(seg, at + {"value": REC - 1, "length": 7, "crc": 0, "op": 8}[where])
    before = files(path)
    for _ in range(2):  # a retry in the same process gets the same answer, not StoreLockedError
        with pytest.raises(CorruptLogError, match=f"{seg.name} is damaged at byte {at}") as ei:
            learnedidx.open(path, retrain="off")
        assert ei.value.path == seg and ei.value.offset == at
        assert "point-in-time" in str(ei.value)
        assert files(path) == before


def test_point_in_time_recovery_keeps_the_history_before_the_damage_and_sets_the_rest_aside(log1000):
    path, seg = log1000
    flip(seg, 10 * REC + REC - 1)
    damaged = seg.read_bytes()
    with pytest.warns(LogRecoveryWarning, match="point-in-time recovery: .*damaged at byte 230.*the cut part of the history is in .*aside-"):
        db = learnedidx.open(path, retrain="off", recovery="point-in-time")
    assert dict(db.items()) == {K(i): V(i) for i in range(10)}
    db.put(b"later", b"1")
    db.close()
    (aside,) = path.glob("aside-*")
    assert (aside / seg.name).read_bytes() == damaged  # the whole segment, the cut part included
    assert stat.S_IMODE(aside.stat().st_mode) == 0o700
    with learnedidx.open(path, retrain="off") as db:  # strict again: the history checks out now
        assert len(db) == 11 and db.get(b"later") == b"1"


def _segments(path: Path, parts: int = 2) -> list[Path]:
    """A log of ``parts`` segments of 1000 // parts records each, K(0), K(1), ... in order:
    checkpoints that failed to be written (the disk was full) rotated the log."""
    per = 1000 // parts
    out = crash(path, f"""
        fileio.ops = ops = faults.FaultyOps()
        ops.fail("open", "checkpoint-*.tmp", errno=28)
        for i in range({per * parts}):
            db.put(b'k%04d' % i, b'v%04d' % i)
            if (i + 1) % {per} == 0 and i + 1 < {per * parts}:
                try:
                    db.checkpoint()
                except learnedidx.errors.StoreIOError as exc:
                    print(exc.errno)
    """, retrain="off")
    assert out == ["28"] * (parts - 1)
    segs = segments(path)
    assert [s.stat().st_size for s in segs] == [per * REC] * parts
    return segs


def test_damage_in_an_earlier_segment_is_refused_and_point_in_time_sets_later_segments_aside(tmp_path):
    path = tmp_path / "db"
    _segments(path)
    with learnedidx.open(path, retrain="off") as db:  # the failed checkpoint lost nothing
        assert dict(db.items()) == {K(i): V(i) for i in range(1000)}
    path2 = tmp_path / "db2"
    first, second = _segments(path2)
    with open(first, "r+b") as f:  # the first segment's last record, torn: the second still follows
        f.truncate(500 * REC - 3)
    before = files(path2)
    with pytest.raises(CorruptLogError, match=f"valid records follow it \\(in {second.name}\\)") as ei:
        learnedidx.open(path2, retrain="off")
    assert ei.value.path == first and ei.value.offset == 499 * REC and files(path2) == before
    with pytest.warns(LogRecoveryWarning):
        with learnedidx.open(path2, retrain="off", recovery="point-in-time") as db:
            assert dict(db.items()) == {K(i): V(i) for i in range(499)}
    (aside,) = path2.glob("aside-*")
    assert sorted(p.name for p in aside.iterdir()) == [first.name, second.name]


def refused(path: Path, culprit: Path, match: str) -> None:
    """Opening ``path`` raises CorruptLogError naming ``culprit``, and changes no file."""
    before = files(path)
    with pytest.raises(CorruptLogError, match=match) as ei:
        learnedidx.open(path, retrain="off")
    assert ei.value.path == culprit and files(path) == before


def point_in_time(path: Path) -> dict:
    """The items of ``path`` opened with point-in-time recovery, which sets something aside."""
    with pytest.warns(LogRecoveryWarning, match="set aside"):
        with learnedidx.open(path, retrain="off", recovery="point-in-time") as db:
            return dict(db.items())


def test_a_missing_checkpoint_before_later_segments_is_detected(tmp_path):
    path = tmp_path / "db"
    with learnedidx.open(path, retrain="off") as db:
        db.put_many([K(i) for i in range(100)], [V(i) for i in range(100)])
    crash(path, "db.put(b'late', b'1')", retrain="off")
    (ckpt,) = path.glob("checkpoint-*.ckpt")
    (seg,) = segments(path)
    ckpt.unlink()
    refused(path, ckpt, f"{ckpt.name} is missing")
    assert point_in_time(path) == {}  # the history's start is gone: nothing after it applies
    (aside,) = path.glob("aside-*")
    assert [p.name for p in aside.iterdir()] == [seg.name]


def test_a_missing_segment_between_two_is_detected(tmp_path):
    path = tmp_path / "db"
    first, middle, last = _segments(path, 3)
    middle.unlink()
    refused(path, middle, f"{middle.name} is missing")
    assert point_in_time(path) == {K(i): V(i) for i in range(333)}


# ------------------------------------------------------------------ checkpoints
def raw_checkpoint(chunks: list[tuple], foot: tuple | None = None) -> bytes:
    """A version-2 checkpoint of raw ``(key_offsets, keys, value_offsets, values)`` chunks,
    CRCs right whatever the contents (written here from docs/store.md, not by the store)."""
    out = [b"LXCK" + struct.pack("<I", 2)]
    n = kb = vb = 0
    for ko, ka, vo, va in chunks:
        body = np.asarray(ko, np.int64).tobytes() + ka + np.asarray(vo, np.int64).tobytes() + va
        sizes = struct.pack("<QQQI", len(ko) - 1, len(ka), len(va), zlib.crc32(body))
        out += [sizes + struct.pack("<I", zlib.crc32(sizes)), body]
        n, kb, vb = n + len(ko) - 1, kb + len(ka), vb + len(va)
    f = struct.pack("<4sQQQQ", b"LXEN", *(foot or (len(chunks), n, kb, vb)))
    out.append(f + struct.pack("<I", zlib.crc32(f)))
    return b"".join(out)


GOOD = ([0, 1, 2, 3], b"abc", [0, 2, 2, 5], b"xxzzz")  # a -> xx, b -> "", c -> zzz


@pytest.mark.parametrize("chunks,why", [
    ([([0, 1, 2, 3], b"abd", [0, 2, 2, 5], b"xxzzz")], None),  # sanity: a good one loads
    ([([0, 2, 1, 3], b"abc", [0, 2, 2, 5], b"xxzzz")], "a key length outside"),  # offsets go back
    ([([1, 2, 3, 4], b"abcd", [0, 2, 2, 5], b"xxzzz")], "offsets do not span"),  # first offset not 0
    ([([0, 1, 1, 2], b"ab", [0, 2, 2, 5], b"xxzzz")], "a key length outside"),  # an empty key
    ([([0, 1, 2, 3], b"abc", [0, 2, 2, 4], b"xxzzz")], "offsets do not span"),  # last != arena length
    ([([0, 1, 2, 3], b"abc", [0, 3, 2, 5], b"xxzzz")], "value offsets decrease"),
    ([([0, 1, 2, 3], b"acb", [0, 2, 2, 5], b"xxzzz")], "key 2 is not greater than key 1"),  # unsorted
    ([([0, 1, 2, 3], b"abb", [0, 2, 2, 5], b"xxzzz")], "key 2 is not greater than key 1"),  # repeated
    ([([0, 1, 2], b"ab", [0, 1, 2], b"xy"), ([0, 1], b"b", [0, 1], b"z")], "at a chunk boundary"),
    ([([0, 1, 2, 3], b"abc", [0, 2, 2, 5], b"xxzzz")], "exceed the footer's totals"),  # footer: 4 value bytes
    ([([0, 1, 2, 3], b"abc", [0, 2, 2, 5], b"xxzzz")], "do not add up to the file"),  # footer's bytes wrong
    ([([0, 9], b"a" * 9, [0, 0], b"")], "a key length outside 1..8"),  # longer than max_key_len
])
def test_a_checkpoint_that_does_not_add_up_is_refused_and_nothing_changes(tmp_path, chunks, why):
    path = tmp_path / "db"
    with learnedidx.open(path, retrain="off", max_key_len=8) as db:
        db.put(b"zz", b"1")
    (ckpt,) = path.glob("checkpoint-*.ckpt")
    foot = None
    if why == "exceed the footer's totals":
        foot = (1, 3, 4, 4)
    elif why == "do not add up to the file":
        foot = (1, 3, 4, 5)
    ckpt.write_bytes(raw_checkpoint(chunks, foot))
    if why is None:
        with learnedidx.open(path, retrain="off", max_key_len=8) as db:
            assert dict(db.items()) == {b"a": b"xx", b"b": b"", b"d": b"zzz"}
        return
    before = files(path)
    with pytest.raises(CorruptLogError, match=why) as ei:
        learnedidx.open(path, retrain="off", max_key_len=8)
    assert ei.value.path == ckpt and str(ckpt.name) in str(ei.value)
    assert files(path) == before


@pytest.mark.parametrize("damage", ["bit", "truncated", "header", "empty"])
def test_a_damaged_checkpoint_is_refused_and_nothing_changes(tmp_path, damage):
    path = tmp_path / "db"
    with learnedidx.open(path, retrain="off") as db:
        db.put_many([K(i) for i in range(3000)], [V(i) for i in range(3000)])
    (ckpt,) = path.glob("checkpoint-*.ckpt")
    data = ckpt.read_bytes()
    ckpt.write_bytes({"bit": data[:5000] + bytes([data[5000] ^ 1]) + data[5001:], "truncated": data[:-7],
                      "header": b"LXCK\x01\0\0\0" + data[8:], "empty": b""}[damage])
    before = files(path)
    for _ in range(2):
        with pytest.raises(CorruptLogError, match=ckpt.name) as ei:
            learnedidx.open(path)
        assert ei.value.path == ckpt and files(path) == before
    (seg,) = segments(path)
    assert point_in_time(path) == {}  # no older checkpoint: the history's beginning is gone
    (aside,) = path.glob("aside-*")
    assert sorted(p.name for p in aside.iterdir()) == sorted([ckpt.name, seg.name])


def test_point_in_time_recovery_falls_back_to_an_older_checkpoint_with_a_complete_log(tmp_path):
    """A crash between a checkpoint's rename and the deletion of what it covers leaves the
    older checkpoint and its log: when the newer one is damaged, they are the history."""
    path = tmp_path / "db"
    with learnedidx.open(path, retrain="off") as db:
        db.put_many([K(i) for i in range(100)], [V(i) for i in range(100)])
    (old,) = path.glob("checkpoint-*.ckpt")
    crash(path, "db.put(b'k0000', b'new')\ndb.put(b'late', b'1')", retrain="off")
    keep = path / "keep"
    keep.mkdir()
    for p in path.iterdir():
        if p.is_file() and p.name != "LOCK":
            (keep / p.name).write_bytes(p.read_bytes())
    with learnedidx.open(path, retrain="off"):
        pass  # checkpoint 2 written, checkpoint 1 and segment 1 deleted
    for p in keep.iterdir():
        p.replace(path / p.name)  # back, as if the crash came before they were deleted
    keep.rmdir()
    crash(path, "pass", retrain="off")  # nothing: just a reopen that changes nothing
    (new,) = [p for p in path.glob("checkpoint-*.ckpt") if p != old]
    flip(new, 20)
    refused(path, new, new.name)
    assert point_in_time(path) == {K(i): V(i) for i in range(100)} | {b"k0000": b"new", b"late": b"1"}


def test_checkpoints_written_in_chunks_read_back_whole(tmp_path):
    """Values are streamed to the checkpoint a slice at a time (chunks of 65536 keys)."""
    path = tmp_path / "db"
    n = 150_000
    keys = [b"key%08d" % i for i in range(n)]
    vals = [b"%d" % i * (i % 7) for i in range(n)]
    with learnedidx.open(path, retrain="off") as db:
        db.put_many(keys, vals)
    with learnedidx.open(path, retrain="off") as db:
        assert db.get_many(keys) == vals and len(db) == n
    (ckpt,) = path.glob("checkpoint-*.ckpt")
    chunks = struct.unpack_from("<4sQ", ckpt.read_bytes(), ckpt.stat().st_size - 40)
    assert chunks == (b"LXEN", 3)  # 65536 + 65536 + 18928 keys


def test_a_value_that_holds_a_record_makes_a_torn_tail_look_like_damage(tmp_path):
    """docs/store.md: every offset after damage is tried; a value holding a whole valid
    record, torn, is refused, and point-in-time recovery then cuts where the tail begins."""
    path = tmp_path / "db"
    inner = struct.pack("<IIB", zlib.crc32(b"\x02victim"), 6, 2) + b"victim"  # DELETE b"victim"
    crash(path, f"db.put(b'a', b'1')\ndb.put(b'b', {b'pad' + inner + b'pad'!r})", retrain="off")
    (seg,) = segments(path)
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size - 2)  # the second record torn after the inner one
    with pytest.raises(CorruptLogError, match="valid records follow it"):
        learnedidx.open(path, retrain="off")
    with pytest.warns(LogRecoveryWarning):
        with learnedidx.open(path, retrain="off", recovery="point-in-time") as db:
            assert dict(db.items()) == {b"a": b"1"}


def test_leftover_tmp_files_are_removed(tmp_path):
    path = tmp_path / "db"
    with learnedidx.open(path, retrain="off") as db:
        db.put(b"k", b"v")
    (path / "checkpoint-000000000099.ckpt.tmp").write_bytes(b"half written")
    (path / "STORE.tmp").write_bytes(b"{")
    with learnedidx.open(path) as db:
        assert db.get(b"k") == b"v"
    assert not list(path.glob("*.tmp"))


# ------------------------------------------------------------------ the directory
def test_second_opener_is_refused(tmp_path):
    with learnedidx.open(tmp_path / "db"):
        with pytest.raises(StoreLockedError):
            learnedidx.open(tmp_path / "db")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_failed_open_holds_no_lock_and_no_descriptor(tmp_path):
    path = tmp_path / "db"
    with learnedidx.open(path, retrain="off") as db:
        db.put(b"k", b"v")
    (ckpt,) = path.glob("checkpoint-*.ckpt")
    good = ckpt.read_bytes()
    flip(ckpt, len(good) - 1)
    with pytest.raises(CorruptLogError):
        learnedidx.open(path)
    n = _fds()
    for _ in range(3):
        with pytest.raises(CorruptLogError):
            learnedidx.open(path)
    with pytest.raises(ConfigError):  # refused for its options
        learnedidx.open(path, trainer="no-such-trainer")
    assert _fds() == n
    code = "import sys, learnedidx; learnedidx.open(sys.argv[1]).close()"
    ckpt.write_bytes(good)  # another process can open it now, as can this one
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=120)
    with learnedidx.open(path) as db:
        assert db.get(b"k") == b"v"


def test_a_path_that_is_a_regular_file_is_a_typed_error(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"x")
    for p in (f, f / "db"):
        with pytest.raises(StoreIOError, match="(?i)not a directory") as ei:
            learnedidx.open(p)
        assert isinstance(ei.value, OSError)
    assert f.read_bytes() == b"x"


def test_files_and_directory_are_private_whatever_the_umask(tmp_path):
    path = tmp_path / "db"
    code = f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        os.umask(0)
        import learnedidx
        from learnedidx.index import fileio
        from tests.index.faults import FaultyOps
        fileio.ops = ops = FaultyOps()
        with learnedidx.open(sys.argv[1], retrain="off") as db:
            db.put_many([b"k%d" % i for i in range(5000)], [b"v"] * 5000)
            db.checkpoint()
        print(sorted(ops.modes.items()))
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(path)], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    modes = dict(eval(out))  # every file the store created, and the mode it asked for
    assert any(n.endswith(".ckpt.tmp") for n in modes) and set(modes.values()) == {0o600}
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for p in path.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p.name


# ------------------------------------------------------------------ what the files depend on
def test_max_key_len_is_kept_and_a_smaller_one_refused(tmp_path):
    path = tmp_path / "db"
    with learnedidx.open(path, retrain="off", max_key_len=100) as db:
        db.put(b"x" * 80, b"long")
    meta = json.loads((path / "STORE").read_text())
    assert meta["max_key_len"] == 100
    before = files(path)
    with pytest.raises(ConfigError, match="max_key_len 50 is less than the 100"):
        learnedidx.open(path, max_key_len=50)
    assert files(path) == before
    (ckpt,) = path.glob("checkpoint-*.ckpt")
    good = ckpt.read_bytes()
    flip(ckpt, len(good) - 1)
    before = files(path)
    with pytest.raises(CorruptLogError):  # refused: not even STORE changes
        learnedidx.open(path, max_key_len=200)
    assert files(path) == before
    ckpt.write_bytes(good)
    with learnedidx.open(path, retrain="off", max_key_len=200) as db:  # larger: kept from now on
        assert db.get(b"x" * 80) == b"long" and len(db) == 1
    with pytest.raises(ConfigError, match="less than the 200"):
        learnedidx.open(path, max_key_len=100)


@pytest.mark.parametrize("damage", ["missing", "garbage", "format", "bad-type"])
def test_a_missing_or_damaged_store_file_is_refused(tmp_path, damage):
    path = tmp_path / "db"
    with learnedidx.open(path, retrain="off") as db:
        db.put(b"k", b"v")
    meta = path / "STORE"
    if damage == "missing":
        meta.unlink()
    else:
        meta.write_text({"garbage": "{\"form", "format": json.dumps({"format": 99, "max_key_len": 10}),
                         "bad-type": json.dumps({"format": 2, "max_key_len": "10"})}[damage])
    before = files(path)
    with pytest.raises(CorruptLogError, match="STORE") as ei:
        learnedidx.open(path)
    assert ei.value.path == meta and files(path) == before


# ------------------------------------------------------------------ limits and closing
def test_a_record_too_large_for_the_format_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """The format's limit is 4 GiB - 1 of payload (a u32 length); checked with a smaller one."""
    from learnedidx.index import wal

    assert wal.MAX_PAYLOAD == 2**32 - 1
    with pytest.raises(struct.error):
        struct.pack("<I", wal.MAX_PAYLOAD + 1)
    path = tmp_path / "db"
    db = learnedidx.open(path, retrain="off")
    db.put(b"a", b"1")
    monkeypatch.setattr(wal, "MAX_PAYLOAD", 1000)
    size = segments(path)[0].stat().st_size
    with pytest.raises(RecordTooLargeError, match="this write needs 1005"):
        db.put(b"a", b"x" * 1000)
    with pytest.raises(RecordTooLargeError):
        db.put_many([b"a", b"b"], [b"x" * 500, b"y" * 500])
    assert segments(path)[0].stat().st_size == size and db.get(b"a") == b"1"
    db.put(b"b", b"2")  # the log is still good
    db.close()
    with learnedidx.open(path) as db:
        assert dict(db.items()) == {b"a": b"1", b"b": b"2"}


@pytest.mark.parametrize("retrain", ["off", "inline", "background"])
def test_a_put_racing_close_completes_or_gets_store_closed(tmp_path, retrain):
    """Each writer's puts either return (and are then durable) or raise StoreClosedError."""
    for trial in range(8):
        path = tmp_path / f"db{trial}"
        db = learnedidx.open(path, retrain=retrain, buffer_threshold=4, retrain_interval=0.001, group_size=16,
                             sync="batch")
        acked: dict[bytes, bytes] = {}
        errors: list[BaseException] = []
        go = threading.Event()

        def writer(t: int) -> None:
            go.wait()
            for i in range(10_000):
                k = b"t%d-%05d" % (t, i)
                try:
                    db.put(k, k)
                except StoreClosedError:
                    return
                except BaseException as exc:  # noqa: BLE001 - any other error fails the test
                    errors.append(exc)
                    return
                acked[k] = k

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        go.set()
        while len(acked) < 50 * (trial + 1):
            pass
        db.close()
        for t in threads:
            t.join()
        assert errors == []
        with learnedidx.open(path, retrain="off") as db2:
            assert dict(db2.items()) == acked


def test_a_log_past_checkpoint_bytes_is_checkpointed_on_its_own(tmp_path):
    """docs/store.md, Files: a checkpoint is taken when the log exceeds checkpoint_bytes, by
    a thread of its own while writes go on; the log segments it covers are dropped."""
    ref = {}
    with learnedidx.open(tmp_path / "db", retrain="off", sync="off", checkpoint_bytes=4096,
                         group_size=32, buffer_threshold=8) as db:
        for i in range(3000):
            k = b"k%05d" % (i * 7 % 3000)
            db.put(k, b"v%d" % i)
            ref[k] = b"v%d" % i
            if i % 5 == 0:
                db.delete(b"k%05d" % (i % 97))
                ref.pop(b"k%05d" % (i % 97), None)
        deadline = time.time() + 20
        while time.time() < deadline and not list((tmp_path / "db").glob("checkpoint-*.ckpt")):
            time.sleep(0.01)
        assert list((tmp_path / "db").glob("checkpoint-*.ckpt"))
        logs = 0
        for p in (tmp_path / "db").glob("wal-*.log"):
            try:
                logs += p.stat().st_size
            except FileNotFoundError:  # dropped by a checkpoint still running: as expected
                pass
        assert logs < 3000 * 20  # most of the log went into checkpoints
    with learnedidx.open(tmp_path / "db", retrain="off") as db:
        assert dict(db.items()) == ref


def test_a_checkpoint_taken_while_a_writer_updates_is_the_image_of_one_moment(tmp_path):
    """docs/store.md, Files: a checkpoint is the image of the moment it was pinned.  A writer
    updates every key in order (values of new lengths) while a checkpoint is taken; the
    file must hold the first j keys updated and the others not, for one j (the checkpoint
    of the single-arena store joined values read at different moments: other keys' bytes
    came back after a crash)."""
    from learnedidx.index import checkpointfile

    n = 200000  # enough that the single-arena store's checkpoint raced its writer every time
    keys = [b"k%06d" % i for i in range(n)]
    with learnedidx.open(tmp_path / "db", sync="off", retrain="off", group_size=256,
                         checkpoint_bytes=1 << 40) as db:
        db.put_many(keys, [b"old-%d" % i for i in range(n)])
        db.checkpoint()
        started = threading.Event()

        def writer():
            for r in range(1, 4):
                for i, k in enumerate(keys):
                    db.put(k, b"r%d-" % r + b"x" * (i % 7) + b"%d" % i)
                    if r == 1 and i == 1000:
                        started.set()

        t = threading.Thread(target=writer)
        t.start()
        started.wait()
        for _ in range(3):
            db.checkpoint()
            ckpt = sorted((tmp_path / "db").glob("checkpoint-*.ckpt"))[-1]
            ka, ko, va, vo = checkpointfile.read(ckpt, 4096)
            got = [va[vo[i]:vo[i + 1]].tobytes() for i in range(len(vo) - 1)]
            assert [ka[ko[i]:ko[i + 1]].tobytes() for i in range(len(ko) - 1)] == keys
            rounds = [0 if v.startswith(b"old") else int(v[1:2]) for v in got]
            # one moment: rounds never go up along the keys, and by at most one
            assert all(a >= b for a, b in zip(rounds, rounds[1:])) and rounds[0] - rounds[-1] <= 1
            for i, v in enumerate(got):  # and every value is the key's own
                assert v.endswith(b"%d" % i) and (v.startswith(b"old") or v[3:-len(b"%d" % i)] == b"x" * (i % 7))
        t.join()
