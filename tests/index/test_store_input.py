"""Bad input gets typed errors."""
from __future__ import annotations

import pytest

import learnedidx
from learnedidx.errors import ConfigError, KeyLengthError, KeyTypeError, StoreClosedError


@pytest.fixture
def db():
    with learnedidx.open(retrain="off", max_key_len=64) as s:
        yield s


@pytest.mark.parametrize("bad", [1, 1.5, None, ["a"], object()])
def test_wrong_key_types(db, bad):
    with pytest.raises(KeyTypeError):
        db.put(bad, b"v")
    with pytest.raises(TypeError):  # KeyTypeError is a TypeError too
        db.get(bad)


def test_wrong_value_type(db):
    with pytest.raises(KeyTypeError, match="values"):
        db.put(b"k", "not bytes")


def test_empty_and_oversized_keys(db):
    with pytest.raises(KeyLengthError):
        db.put(b"", b"v")
    with pytest.raises(ValueError):
        db.put(b"x" * 65, b"v")
    db.put(b"x" * 64, b"ok")
    assert db.get(b"x" * 64) == b"ok"
    # get's fast path leaves the length check to the lookup kernel: with buffered writes
    # and without, the errors are the same.
    for merged in (False, True):
        if merged:
            db.retrain_now()
        with pytest.raises(KeyLengthError):
            db.get(b"")
        with pytest.raises(KeyLengthError):
            db.get(b"x" * 65)
        assert db.get(b"x" * 63) is None and db.get(b"x" * 64, 7) == b"ok"


def test_str_keys_are_utf8_and_nul_bytes_work(db):
    db.put("clé", b"1")
    assert db.get("clé".encode()) == b"1"
    db.put(b"a\x00b", b"2")
    db.put(b"a", b"3")
    db.retrain_now()
    assert db.get(b"a\x00b") == b"2" and db.get(b"a") == b"3"
    assert [k for k, _ in db.scan(b"a", 5)] == [b"a", b"a\x00b", "clé".encode()]


def test_mismatched_batch(db):
    with pytest.raises(ValueError):
        db.put_many([b"a", b"b"], [b"1"])


@pytest.mark.parametrize("opts", [{"sync": "sometimes"}, {"retrain": "never"}, {"max_key_len": 0},
                                  {"group_size": 2}, {"max_features": 0}, {"trainer": "nope"}])
def test_bad_options(tmp_path, opts):
    with pytest.raises(ConfigError):
        learnedidx.open(tmp_path / "db", **opts)


def test_closed_store():
    s = learnedidx.open()
    s.close()
    with pytest.raises(StoreClosedError):
        s.get(b"k")
    with pytest.raises(StoreClosedError):
        s.put(b"k", b"v")


def test_batches_mixing_key_types_across_chunks(db):
    # Batches are packed in chunks of 2,048 keys: str and bytearray keys anywhere in a
    # long batch are converted, and a bad key anywhere is refused before anything is written.
    keys = [b"k%05d" % i for i in range(5000)]
    mixed = list(keys)
    mixed[10], mixed[3000], mixed[4999] = "k00010", bytearray(b"k03000"), memoryview(b"k04999")
    db.put_many(mixed, keys)
    assert db.get_many(mixed) == keys
    assert len(db) == 5000
    with pytest.raises(learnedidx.errors.KeyTypeError):
        db.put_many(keys[:4096] + [1234], [b"v"] * 4097)
    with pytest.raises(learnedidx.errors.KeyLengthError):
        db.get_many(keys[:4100] + [b""])
    assert db.get(b"k00001") == b"k00001"


def test_small_batches_check_keys_too(db):
    db.put_many([b"a", "b", bytearray(b"c")], [b"1", b"2", b"3"])
    assert db.get_many(["a", b"b", memoryview(b"c"), b"zz"]) == [b"1", b"2", b"3", None]
    with pytest.raises(KeyLengthError):
        db.get_many([b"a", b""])
    with pytest.raises(KeyLengthError):
        db.get_many([b"x" * 65])
    with pytest.raises(KeyTypeError):
        db.get_many([b"a", 1])
    assert db.get_many([]) == []


def test_scan_many_counts_are_checked(db):
    db.put_many([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    assert db.scan_many([b"a", b"b"], [0, 5]) == [[], [(b"b", b"2"), (b"c", b"3")]]
    with pytest.raises(ValueError, match="2 start keys but 1 counts"):
        db.scan_many([b"a", b"b"], [1])
    with pytest.raises(ValueError):
        db.scan_many([b"a"], [-1])
    with pytest.raises(TypeError):
        db.scan_many([b"a"], 1.5)
