"""Store options, backends by name, and the promises of docs/store.md about closed stores
and locks."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import learnedidx
from learnedidx.errors import ConfigError, StoreClosedError
from learnedidx.index.options import StoreOptions
from learnedidx.index.qr import CpuBackend
from learnedidx.index.store import Store
from learnedidx.index.training import get_backend, known_backends


@pytest.mark.parametrize("name,value", [
    ("sync", "sometimes"), ("retrain", "never"), ("max_key_len", 0), ("max_key_len", 1.5), ("max_key_len", True),
    ("group_size", 8), ("group_size", "big"), ("max_features", 0), ("max_features", 256),
    ("buffer_threshold", 0), ("checkpoint_bytes", -1), ("sync_interval", 0), ("sync_interval", -0.1),
    ("sync_interval", float("nan")), ("retrain_interval", 0.0), ("retrain_interval", "1"), ("trainer_retry", -1),
    ("full_retrain_fraction", -0.5), ("full_retrain_fraction", float("inf")), ("trainer", 3),
    ("trainer_options", ["socket"]), ("trainer", "nope"), ("recovery", "lenient"), ("recovery", None),
    ("retrain_after", -0.1), ("retrain_after", float("nan")), ("retrain_after", "half"),
    # upper bounds: each of these passed once and then mapped terabytes, overflowed or killed a thread
    ("buffer_threshold", 2 ** 40), ("buffer_threshold", 2 ** 63), ("max_key_len", 2 ** 63),
    ("group_size", 2 ** 62), ("sync_interval", 1e308), ("retrain_interval", 1e308), ("trainer_retry", 1e308),
    ("checkpoint_bytes", 2 ** 64), ("max_backlog", 2 ** 64), ("full_retrain_fraction", 1.5),
    ("trainer_options", {"bogus": 1}),
])
def test_every_option_is_checked_and_the_error_names_it(name, value):
    with pytest.raises(ConfigError, match=name):
        learnedidx.open(**{name: value})


@pytest.mark.parametrize("trainer,options", [
    ("cpu", {"bogus": 1}), ("fpga-emu", {"bogus": 1}), ("server", {"bogus": 1}), ("server", {"timeout": "x"}),
    ("server", {"timeout": float("inf")}), ("server", {"cache_r": 1}), ("server", {"max_groups": 0}),
    ("server", {"socket": 3}), ("server", {"tcp": ("localhost", "80")}),
])
def test_trainer_options_are_checked_at_open(trainer, options):
    with pytest.raises(ConfigError, match="trainer"):
        learnedidx.open(trainer=trainer, trainer_options=options)


def test_every_option_at_its_documented_bounds_works():
    """The largest value of each bounded option opens a store that works (the batch log's
    sync thread waits its interval, close() does not wait for it)."""
    import tempfile
    from learnedidx.index.options import INT_RANGES, NUMBER_RANGES
    assert set(INT_RANGES) | set(NUMBER_RANGES) == {
        "max_key_len", "group_size", "max_features", "buffer_threshold", "checkpoint_bytes", "max_backlog",
        "sync_interval", "retrain_interval", "trainer_retry", "full_retrain_fraction", "retrain_after"}
    top = {name: hi for name, (lo, hi) in INT_RANGES.items() if name != "max_features"}
    top.update({name: hi for name, (lo, hi, _) in NUMBER_RANGES.items()})
    with tempfile.TemporaryDirectory() as d:
        with learnedidx.open(d, sync="batch", **top) as db:
            db.put(b"k" * (1 << 20), b"v")
            db.put_many([b"a", b"b"], [b"1", b"2"])
            assert db.get(b"k" * (1 << 20)) == b"v" and len(db) == 3
        with learnedidx.open(d, max_key_len=1 << 20) as db:
            assert len(db) == 3


def test_unknown_options_and_options_twice_are_refused():
    with pytest.raises(ConfigError, match="unknown store option.*colour"):
        learnedidx.open(colour="blue")
    with pytest.raises(ConfigError):
        Store(None, StoreOptions(), retrain="off")
    with pytest.raises(ConfigError, match="instance"):
        learnedidx.open(trainer=CpuBackend(), trainer_options={"x": 1})


def test_options_object_is_frozen_and_used_as_given():
    opts = StoreOptions(retrain="off", group_size=64, checkpoint_bytes=0, trainer_options={"a": 1})
    with pytest.raises(AttributeError):
        opts.group_size = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        opts.trainer_options["a"] = 2  # type: ignore[index]
    with Store(None, StoreOptions(retrain="off", group_size=64)) as db:
        assert db.options.group_size == 64
        db.put_many([b"%04d" % i for i in range(200)], [b"v"] * 200)
        assert db.stats()["groups"] == 3


def test_a_fresh_process_knows_every_backend_and_unknown_names_list_them():
    code = "from learnedidx.index.training import known_backends; import json; print(json.dumps(known_backends()))"
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True).stdout
    assert {"cpu", "fpga-emu", "server"} <= set(json.loads(out))
    with pytest.raises(ConfigError, match="known: cpu, fpga-emu, ") as info:  # (tests may register more)
        get_backend("fpga")
    assert "server" in str(info.value)
    assert set(known_backends()) >= {"cpu", "fpga-emu", "server"}
    assert get_backend("fpga-emu", units=2).feature_limit() == 32


def test_max_features_wider_than_the_trainer_is_refused_at_open():
    with pytest.raises(ConfigError, match="max_features 40 exceeds the 32"):
        learnedidx.open(trainer="fpga-emu", max_features=40)
    with learnedidx.open(trainer="fpga-emu", trainer_options={"max_features": 48}, max_features=40,
                         retrain="off") as db:
        db.put_many([b"k%06d" % i for i in range(6000)], [b"v"] * 6000)
        assert db.stats()["device_cycles"] > 0 and db.stats()["trainer_failed"] is False


def test_closed_store_refuses_len_stats_and_with():
    db = learnedidx.open(retrain="background")
    db.put(b"a", b"1")
    assert len(db) == 1
    db.close()
    db.close()  # closing again is a no-op
    for op in (len, Store.stats, Store.items, Store.retrain_now, Store.checkpoint, lambda s: s.__enter__(),
               lambda s: s.get_many([b"a"]), lambda s: s.scan(b"a", 1), lambda s: s.delete(b"a"),
               lambda s: s.put_many([b"a"], [b"1"]), lambda s: b"a" in s):
        with pytest.raises(StoreClosedError):
            op(db)
    with pytest.raises(StoreClosedError):
        with db:
            pass


_EXIT_WITH_STORES = """
import learnedidx
from numba import njit
closed = learnedidx.open()
closed.put(b"a", b"1")
closed.close()
kept = learnedidx.open()  # never closed
kept.put_many([b"k%07d" % i for i in range(20000)], [b"v"] * 20000)
kept.retrain_now()

@njit
def f(x):  # keeps this module's globals, and so both stores, until the interpreter's last steps
    return x

f(1)
"""


def test_stores_alive_at_interpreter_exit_end_quietly():
    done = subprocess.run([sys.executable, "-c", _EXIT_WITH_STORES], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr


class _ProbingBackend:
    """The cpu backend, recording whether the store's writer lock was free while it trained."""

    name = "probe"

    def __init__(self) -> None:
        self.cpu = CpuBackend()
        self.store: Store | None = None
        self.writer_lock_free: list[bool] = []

    def _probe(self) -> None:
        self.writer_lock_free.append(not self.store._wlock.locked())

    def train_full(self, A, b):
        self._probe()
        return self.cpu.train_full(A, b)

    def train_incremental(self, R_old, A_delta, A, b):
        self._probe()
        return self.cpu.train_incremental(R_old, A_delta, A, b)


def test_retraining_runs_outside_the_writer_lock_and_checkpoints_train_nothing(tmp_path):
    """docs/store.md, Thread safety: a retrain takes the writer lock only to take its inputs
    and to publish its model (inline stores retrain in the writer, under it); a checkpoint
    pins an image and trains nothing."""
    probe = _ProbingBackend()
    with Store(tmp_path / "db", retrain="off", group_size=64, buffer_threshold=8, trainer=probe) as db:
        probe.store = db
        db.put_many([b"k%05d" % i for i in range(0, 2000, 2)], [b"v"] * 1000)  # bulk load: in the writer
        probe.writer_lock_free.clear()
        for i in range(1, 200, 2):
            db.put(b"k%05d" % i, b"n")
        db.retrain_now()
        assert probe.writer_lock_free and all(probe.writer_lock_free)
        probe.writer_lock_free.clear()
        for i in range(201, 400, 2):
            db.put(b"k%05d" % i, b"n")
        db.checkpoint()
        assert probe.writer_lock_free == []
    probe = _ProbingBackend()
    with Store(retrain="inline", group_size=64, buffer_threshold=8, trainer=probe) as db:
        probe.store = db
        for i in range(200):
            db.put(b"k%05d" % i, b"n")
        assert probe.writer_lock_free and not any(probe.writer_lock_free)