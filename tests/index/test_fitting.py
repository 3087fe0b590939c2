"""Training every group at once in compiled code, against group-by-group training through
the cpu backend and against numpy's least squares."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learnedidx.errors import WorkloadError
from learnedidx.index import fitting, grouping, ops
from learnedidx.index import kernels as K
from learnedidx.index.keys import KeyBatch
from learnedidx.index.options import StoreOptions
from learnedidx.index.qr import RIDGE
from learnedidx.index.retrainer import Retrainer
from learnedidx.workloads.generators import key_names
from learnedidx.workloads.keysources import load_keys


def _same_as_group_by_group(keys: list[bytes], opts: StoreOptions) -> fitting.Fits:
    """Fit ``keys`` (sorted, distinct) both ways; check that they agree and return the fits."""
    kb = KeyBatch.from_keys(keys)
    bounds = fitting.cut_bounds(kb.arena, kb.offsets, 0, len(keys), opts.group_size, opts.min_group,
                                opts.max_features)
    fits = fitting.fit_groups(kb.arena, kb.offsets, bounds, opts.max_features)
    one_by_one = grouping.fit_each(kb.arena, kb.offsets, bounds, opts, Retrainer(opts))
    G = len(bounds) - 1
    assert fits.gint.shape == (G, K.G_COLS) and one_by_one.gint.shape == (G, K.G_COLS)
    # The same compiled arithmetic on the same numbers: equal to the last bit.
    np.testing.assert_array_equal(fits.gint, one_by_one.gint)
    np.testing.assert_array_equal(fits.coef, one_by_one.coef)
    np.testing.assert_array_equal(fits.R_off, one_by_one.R_off)
    np.testing.assert_array_equal(fits.R, one_by_one.R)
    return fits


def _oracle_check(keys: list[bytes], fits: fitting.Fits, max_features: int) -> None:
    """Each group's R and coefficients against numpy on its feature matrix: ``RᵀR = AᵀA + λI``
    and the ridge least-squares fit; error bounds hold every key's rank and are attained."""
    kb = KeyBatch.from_keys(keys)
    for g in range(len(fits.gint)):
        s, e, prefix, feat, lo, hi = fits.gint[g].tolist()
        if e - s <= 1:
            assert (prefix, feat, lo, hi) == (0, 0, 0, 0)
            continue
        ks = keys[s:e]
        assert prefix == len(os.path.commonprefix([ks[0], ks[-1]])) and feat == min(max_features, max(map(len, ks)) - prefix)
        A = K.build_features(kb.arena, kb.offsets, s, e, prefix, feat)
        n = feat + 1
        R = fits.R[fits.R_off[g]:fits.R_off[g + 1]].reshape(n, n)
        gram = A.T @ A + RIDGE * np.eye(n)
        np.testing.assert_allclose(R.T @ R, gram, rtol=1e-9, atol=1e-9 * np.abs(gram).max())
        b = np.arange(e - s, dtype=np.float64)
        ref = np.linalg.lstsq(np.r_[A, np.sqrt(RIDGE) * np.eye(n)], np.r_[b, np.zeros(n)], rcond=None)[0]
        np.testing.assert_allclose(A @ fits.coef[g, :n], A @ ref, atol=1e-6 * (e - s))
        assert not fits.coef[g, n:].any()
        pred = np.floor(np.clip(A @ fits.coef[g, :n], -1e15, 1e15)).astype(np.int64)
        err = np.arange(e - s) - pred  # numpy's sums may round differently right at an integer
        assert lo <= err.min() + 1 and err.max() - 1 <= hi and lo >= err.min() - 1 and hi <= err.max() + 1


key_sets = st.lists(st.builds(lambda p, s: p + s, st.sampled_from([b"", b"\x00", b"user", b"same/long/prefix/"]),
                              st.binary(min_size=1, max_size=45)), max_size=400, unique=True)


@settings(max_examples=60, deadline=None)
@given(key_sets, st.sampled_from([(16, 8), (16, 32), (64, 4), (40, 255)]))
def test_fit_groups_equals_group_by_group_training(keys, shape):
    group_size, max_features = shape
    opts = StoreOptions(group_size=group_size, max_features=max_features)
    keys = sorted(keys)
    _oracle_check(keys, _same_as_group_by_group(keys, opts), max_features)


@pytest.mark.parametrize("name", ["ycsb", "words", "constant columns", "padding", "two keys"])
def test_adversarial_key_sets(name):
    if name == "ycsb":
        keys = key_names(np.arange(20_000))
    elif name == "words":
        try:
            keys = load_keys("words", 20_000)
        except WorkloadError:
            pytest.skip("no word list")
    elif name == "constant columns":  # equal-length keys, most bytes the same in every key
        keys = [b"k/%04d/zzzzzzzzzz/%02d" % (i // 100, i % 100) for i in range(20_000)]
    elif name == "padding":  # lengths 1..40: zero-padded features, prefixes of each other
        keys = [b"\x00" * (i % 40) + b"%d" % i for i in range(20_000)]
    else:
        keys = [b"a", b"a\x00"]
    opts = StoreOptions(group_size=256)
    keys = sorted(set(keys))
    _oracle_check(keys, _same_as_group_by_group(keys, opts), opts.max_features)


def test_retrainer_trains_all_groups_at_once_only_on_the_cpu_backend():
    keys = sorted(key_names(np.arange(3000)))
    kb = KeyBatch.from_keys(keys)
    opts = StoreOptions(group_size=128)
    bounds = fitting.cut_bounds(kb.arena, kb.offsets, 0, len(keys), 128, opts.min_group, opts.max_features)
    cpu = Retrainer(opts)
    fits = cpu.train_all(kb.arena, kb.offsets, bounds)
    assert fits is not None and cpu.stats["retrains_full"] == len(bounds) - 1 and cpu.stats["train_seconds"] > 0
    emu = Retrainer(StoreOptions(group_size=128, trainer="fpga-emu"))
    assert emu.train_all(kb.arena, kb.offsets, bounds) is None  # its own datapath: group by group
    live = grouping.build(kb.arena, kb.offsets, list(keys), opts, emu, opts.max_key_len)
    assert emu.stats["retrains_full"] == len(bounds) - 1
    get = ops.entry_points()["get"]
    assert all(get(live.addr, k) is k for k in keys)  # each key is its own value here


@pytest.mark.parametrize("parts", [1, 2])
def test_many_groups_in_one_call_equal_each_group_alone(parts):
    """``Retrainer.fit_here`` (one compiled call for many groups, on ``parts`` cores) gives
    each group exactly what ``fit_one`` gives it alone: full retrains, incremental ones on
    a memo with the keys written since, a memo of another shape (full again), one key and
    none; the full ones checked against numpy's least squares too."""
    from learnedidx.index.live import Memo

    rng = np.random.default_rng(5)
    opts = StoreOptions(max_features=24)
    rt = Retrainer(opts)
    specs = []
    for t in range(23):
        n = [0, 1, 2, 700, 3000][t % 5]
        ks = sorted({b"user%019d" % x for x in rng.integers(0, 10**18, n + 300).tolist()})
        new = ks[::7][:300] if n > 1 else []
        old = sorted(set(ks) - set(new))[:n]
        keys = sorted(set(old) | set(new)) if n > 1 else old
        kb = KeyBatch.from_keys(keys)
        memo = None
        if n > 1 and t % 3:
            okb = KeyBatch.from_keys(old)
            c, prefix, feat, R, *_ = fitting.fit_one(okb.arena, okb.offsets, len(old), 24, np.zeros((0, 0)),
                                                      -1, -1, False, np.zeros(0, np.uint8), np.zeros(1, np.int64))
            memo = Memo(R, prefix + (t % 3 == 2), feat, 0)  # t % 3 == 2: another prefix, so full
        specs.append((kb.arena, kb.offsets, len(keys), memo, memo is not None, [KeyBatch.from_keys(new)]))
    got = rt.fit_here(specs, parts)
    assert len(got) == len(specs)
    incremental = 0
    for (arena, offs, n, memo, use, pending), out in zip(specs, got):
        p = pending[0]
        ref = fitting.fit_one(arena, offs, n, 24, memo.R if memo else np.zeros((0, 0)),
                              memo.prefix if memo else -1, memo.feat if memo else -1, use, p.arena, p.offsets)
        for a, b in zip(out, ref):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        incremental += bool(out[4])
        coef, prefix, feat, R = out[:4]
        if n > 1 and not out[4]:
            A = K.build_features(arena, offs, 0, n, prefix, feat)
            m = feat + 1
            ref_x = np.linalg.lstsq(np.r_[A, np.sqrt(RIDGE) * np.eye(m)], np.r_[np.arange(n, dtype=float), np.zeros(m)],
                                    rcond=None)[0]
            np.testing.assert_allclose(A @ coef[:m], A @ ref_x, atol=1e-6 * n)
            np.testing.assert_allclose(R.T @ R, A.T @ A + RIDGE * np.eye(m), rtol=1e-9, atol=1e-9 * np.abs(A.T @ A).max())
    assert incremental > 0 and rt.stats["retrains_incremental"] == incremental
    assert rt.stats["retrains_full"] == sum(1 for s in specs if s[2] > 1) - incremental


def test_a_job_whose_sizes_disagree_is_refused_before_compiled_code_reads_it():
    """fit_jobs reads by address without bounds checks: a memo R of the wrong shape or
    offsets past the key bytes are refused (an internal error), never read."""
    from learnedidx.errors import LearnedIdxError
    from learnedidx.index.live import Memo

    keys = sorted(key_names(np.arange(500)))
    kb = KeyBatch.from_keys(keys)
    rt = Retrainer(StoreOptions())
    none = KeyBatch.from_keys([])
    bad_memo = Memo(np.eye(3), 4, 10, 0)  # R for 2 features, memo says 10
    with pytest.raises(LearnedIdxError, match="memo R"):
        rt.fit_here([(kb.arena, kb.offsets, 500, bad_memo, True, [none])])
    with pytest.raises(LearnedIdxError, match="offsets"):
        rt.fit_here([(kb.arena[:100], kb.offsets, 500, None, False, [none])])
    with pytest.raises(LearnedIdxError, match="offsets"):
        rt.fit_here([(kb.arena, kb.offsets[:300], 500, None, False, [none])])
    assert rt.stats["retrains_full"] == 0
