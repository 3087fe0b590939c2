"""Store.get and Store.put as compiled methods (learnedidx/index/_methods.c): every way
of calling them answers what the Python methods answer, against a dict."""
from __future__ import annotations

import gc
import inspect
import random
import subprocess
import sys
import threading
import weakref

import pytest

import learnedidx
from learnedidx.errors import StoreClosedError
from learnedidx.index import direct, methods
from learnedidx.index.store import Store


def test_the_compiled_methods_are_built():
    # The test environment has a compiler: an optional build that failed silently would
    # leave the store on its slower Python methods, which this catches.
    assert methods.BUILT
    assert type(Store.get).__name__ == "Method" and type(Store.put).__name__ == "Method"
    assert direct.PUT_DONE == methods._methods.PUT_DONE


def _stream(seed: int, n: int) -> list:
    rng = random.Random(seed)
    pool = [rng.randbytes(rng.randint(1, 24)) for _ in range(300)] + [b"\x00", b"\xff" * 16]
    odd = ["str key", "", b"", b"x" * 5000, bytearray(b"ba"), memoryview(b"mv"), 7, None, 1.5]
    ops = []
    for _ in range(n):
        r = rng.random()
        if r < 0.45:
            ops.append(("put", rng.choice(pool), rng.randbytes(rng.randint(0, 12))))
        elif r < 0.5:
            ops.append(("put", rng.choice(pool + odd), rng.choice([b"v", "str value", 3, bytearray(b"bv")])))
        elif r < 0.9:
            ops.append(("get", rng.choice(pool), rng.choice([None, b"dflt"])))
        else:
            ops.append(("get", rng.choice(odd + pool), b"dflt"))
    return ops


def _outcome(f, *args):
    try:
        return "ok", f(*args)
    except Exception as e:  # the error type and message are part of the answer
        return type(e), str(e)


@pytest.mark.parametrize("form", ["bound", "method", "unbound", "python"])
def test_every_call_form_answers_as_the_python_methods(form):
    ops = _stream(11, 6000)
    ref = learnedidx.open(group_size=32, buffer_threshold=8)  # the Python methods, as written
    db = learnedidx.open(group_size=32, buffer_threshold=8)
    py_get, py_put = Store.get.__wrapped__, Store.put.__wrapped__
    if form == "bound":
        get, put = db.get, db.put
    elif form == "method":  # s.get(k): the class's descriptor, called with the store
        get, put = (lambda *a: db.get(*a)), (lambda *a: db.put(*a))
    elif form == "unbound":
        get, put = (lambda *a: Store.get(db, *a)), (lambda *a: Store.put(db, *a))
    else:
        get, put = (lambda *a: py_get(db, *a)), (lambda *a: py_put(db, *a))
    oracle: dict = {}
    for op, k, x in ops:
        if op == "put":
            want = _outcome(py_put, ref, k, x)
            assert _outcome(put, k, x) == want
            if want[0] == "ok":
                oracle[k.encode() if isinstance(k, str) else bytes(k)] = x.encode() if isinstance(x, str) else bytes(x)
        else:
            want = _outcome(py_get, ref, k, x)
            assert _outcome(get, k, x) == want
            if want[0] == "ok" and isinstance(k, bytes):
                assert want[1] == oracle.get(k, x)
    assert dict(db.items()) == dict(ref.items()) == oracle
    assert len(db) == len(oracle)
    db.close()
    ref.close()


def test_keyword_and_odd_argument_forms():
    db = learnedidx.open()
    db[b"k"] = b"v"
    assert db.get(b"k") == db.get(key=b"k") == db.get(b"k", default=1) == db[b"k"] == b"v"
    assert db.get(b"absent", default=1) == 1 and db.get(key=b"absent") is None
    assert b"k" in db and b"absent" not in db
    db.put(key=b"k2", value=b"v2")
    assert db.get(b"k2") == b"v2"
    for call in (lambda: db.get(), lambda: db.get(b"a", 1, 2), lambda: db.put(b"a"),
                 lambda: db.put(b"a", b"b", b"c"), lambda: db.get(b"a", colour=1), lambda: Store.get()):
        with pytest.raises(TypeError):
            call()
    db.close()


def test_bound_methods_look_like_methods():
    db = learnedidx.open()
    g = db.get
    assert g.__self__ is db and g.__func__ is Store.get and g == db.get and hash(g) == hash(db.get)
    assert g != db.put and g != learnedidx.open().get
    assert g.__name__ == "get" and g.__doc__ == Store.get.__wrapped__.__doc__
    assert list(inspect.signature(g).parameters) == ["key", "default"]
    assert list(inspect.signature(Store.put).parameters) == ["self", "key", "value"]
    assert "Store.get" in repr(g) and "Store.put" in repr(Store.put)
    db.close()


def test_a_bound_method_keeps_its_store_and_only_its_store_alive():
    g = learnedidx.open().get  # the store has no other reference
    gc.collect()
    assert g(b"absent", 5) == 5
    db = g.__self__
    db.put(b"k", b"v")
    assert g(b"k") == b"v"
    ref = weakref.ref(db)
    del db, g
    assert ref() is None  # freed by reference counting, with no cycle to wait for


def test_closed_stores_refuse_every_call_form():
    db = learnedidx.open()
    db.put(b"k", b"v")
    g, p = db.get, db.put
    db.close()
    for call in (lambda: g(b"k"), lambda: db.get(b"k"), lambda: p(b"k", b"w"), lambda: db.put(b"j", b"w"),
                 lambda: Store.get(db, b"k"), lambda: db[b"k"]):
        with pytest.raises(StoreClosedError):
            call()


class _Imposter:
    _addr = 8  # an address the kernel must never be handed


def test_objects_that_are_not_stores_never_reach_the_kernel():
    for obj in (_Imposter(), object(), None, 0):
        with pytest.raises(AttributeError):
            Store.get(obj, b"k")
        with pytest.raises(AttributeError):
            Store.put(obj, b"k", b"v")


def test_subclasses_use_the_compiled_methods_and_may_override_them():
    class Counting(Store):
        def __init__(self):
            super().__init__()
            self.absent = 0

        def _absent(self, key, default):
            self.absent += 1
            return super()._absent(key, default)

    class Own(Store):
        def get(self, key, default=None):
            return b"own"

    c = Counting()
    c.put(b"k", b"v")
    assert c.get(b"k") == b"v" and c.get(b"x", 3) == 3 and c.absent == 1
    o = Own()
    o.put(b"k", b"v")
    assert o.get(b"k") == b"own" and o[b"k"] == b"own"
    c.close()
    o.close()


def test_durable_puts_are_logged_before_they_return(tmp_path):
    # The writer process dies (no close, no checkpoint) after its last put returned.
    code = (
        "import os, sys, learnedidx\n"
        "db = learnedidx.open(sys.argv[1], sync='always')\n"
        "put = db.put\n"
        "for i in range(300):\n"
        "    put(b'key%05d' % i, b'v%d' % i)\n"
        "db[b'last'] = b'set'\n"
        "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "db")], check=True, timeout=300)
    with learnedidx.open(tmp_path / "db") as db:
        assert len(db) == 301 and db.get(b"key00299") == b"v299" and db[b"last"] == b"set"


def test_readers_and_a_writer_through_compiled_methods():
    db = learnedidx.open(group_size=64, buffer_threshold=16)
    keys = [b"%08d" % i for i in range(20000)]
    errors: list = []

    def write():
        put = db.put
        for k in keys:
            put(k, k)

    def read():
        get = db.get
        seen = 0
        while seen < len(keys):
            got = [get(k) for k in keys[::97]]
            if any(v is not None and v != k for v, k in zip(got, keys[::97])):
                errors.append(got)
                return
            seen = sum(v is not None for v in got) * 97
    ts = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not errors
    assert all(db.get(k) == k for k in keys)
    db.close()
