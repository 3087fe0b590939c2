"""Generated kernels against numpy: inlined per-tuple code, rank-1 blocks, prefetching SGD.

The kernels write the DSL's per-tuple functions into their loops, each call computed once
(:mod:`learnedidx.indb.dsl.inline`), and add rank-1 terms in blocks of rows; whatever they do
to go fast, their sums must be the sums the DSL's definitions give, computed here by numpy.
"""
import numpy as np
import pytest

from learnedidx.indb import runtime
from learnedidx.indb.dsl import compile_algorithm
from learnedidx.indb.dsl.kernels import BLOCK, _accumulate_source, accumulate_kernel, loss_kernel, sgd_kernel

RNG = np.random.default_rng(11)
X = np.c_[np.ones(3 * BLOCK + 5), RNG.normal(size=(3 * BLOCK + 5, 4))]  # a partial last block
Y = (RNG.random(len(X)) > 0.5).astype(float)
W = RNG.normal(size=X.shape[1]) * 0.3


def sums(alg, w=W, X=X, y=Y):
    kernel, modes, shapes = accumulate_kernel(alg, w, X[0], y[0])
    acc = [np.zeros(s) for s in shapes]
    loss = np.zeros(1)
    kernel(X, y, w, 0, len(y), *acc, loss)
    return modes, acc, loss[0]


def test_accumulators_symmetric_and_not_equal_their_definitions():
    alg = compile_algorithm("acc_forms", """
def acc_sym(w, x, y):
    p = sigmoid(dot(w, x))
    return p * (1 - p) * outer(x, x)
def acc_cross(w, x, y):
    return y * outer(x, w)
def acc_vec(w, x, y):
    return (y - dot(w, x)) * x
def acc_num(w, x, y):
    return dot(w, x) * dot(w, x)
def update(w, sym, cross, vec, num):
    return w
def loss(w, x, y):
    z = dot(w, x)
    return log1p(exp(-abs(z))) + max(z, 0.0) - y * z
""")
    modes, (sym, cross, vec, num), loss = sums(alg)
    assert modes == ("rank1s", "rank1", "scaled", "scalar")
    z = X @ W
    p = 1 / (1 + np.exp(-z))
    np.testing.assert_allclose(sym, (X * (p * (1 - p))[:, None]).T @ X, rtol=1e-12)
    np.testing.assert_allclose(cross, np.outer((X * Y[:, None]).sum(axis=0), W), rtol=1e-12)
    np.testing.assert_allclose(vec, X.T @ (Y - z), rtol=1e-12)
    np.testing.assert_allclose(num, [z @ z], rtol=1e-12)
    assert loss == pytest.approx(np.sum(np.log1p(np.exp(-np.abs(z))) + np.maximum(z, 0) - Y * z), rel=1e-12)


def test_what_the_functions_share_is_computed_once():
    source = _accumulate_source(runtime.builtin("logregr"), ("scaled", "rank1s"), True)
    # acc_grad, acc_hess and loss each compute dot(w, x) and exp(-abs(z))
    assert source.count("dot(") == 1 and source.count("exp(") == 1


def test_calls_under_a_condition_stay_under_it():
    """z is 0 at w = 0: the division may only run where the DSL runs it (Numba raises on a
    float division by zero), so an inliner that hoisted it would fail here."""
    alg = compile_algorithm("guarded", """
epochs = 2
learning_rate = 0.1
def gradient(w, x, y):
    z = dot(w, x)
    return ((1.0 / z) * sigmoid(z) if z != 0 else y - sigmoid(dot(w, w) * 0.0)) * x
def loss(w, x, y):
    z = dot(w, x)
    return 0.0 if z == 0 else log(abs(z))
""")
    out = runtime.train(alg, {"X": X[:, 1:], "y": Y}, {"merge": "sum"}, threads=1)
    assert np.all(np.isfinite(out.model["coef"]))


def test_a_function_that_cannot_be_inlined_is_called():
    alg = compile_algorithm("called", """
def acc_s(w, x, y):
    y * 2.0
    return y * x
def update(w, s):
    return s
""")
    modes, (s,), _ = sums(alg)
    np.testing.assert_allclose(s, X.T @ Y, rtol=1e-12)


def test_an_sgd_epoch_in_a_random_order_is_the_sequence_of_its_steps():
    """The kernel prefetches the rows ahead in the order it visits them; its model must be
    the one the steps, applied in that order, give."""
    alg = runtime.builtin("svm")
    y = np.where(Y > 0, 1.0, -1.0)
    order = RNG.permutation(len(y))
    kernel = sgd_kernel(alg, np.zeros(X.shape[1]), X[0], y[0])
    got = kernel(X, y, np.zeros(X.shape[1]), 0.1, 2, 0, order, 1, 1e-4)
    w = np.zeros(X.shape[1])
    for t, i in enumerate(order, start=1):
        g = -y[i] * X[i] if y[i] * (w @ X[i]) < 1 else np.zeros_like(w)
        lr = 0.1 / (1 + 0.1 * 1e-4 * t)
        w = w - lr * (g + 1e-4 * w * (np.arange(len(w)) > 0))
    np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12)
    assert loss_kernel(alg)(X, y, w) == pytest.approx(np.maximum(0, 1 - y * (X @ w)).sum(), rel=1e-12)


def test_update_may_give_the_loss_of_its_model_and_then_no_pass_sums_it():
    alg = compile_algorithm("given", """
def acc_xy(w, x, y):
    return y * x
def update(w, n, xy):
    return xy / n, 7.0 + n
def loss(w, x, y):
    return 1e9
""")
    out = runtime.train(alg, {"X": X, "y": Y}, {"intercept": False})
    np.testing.assert_allclose(out.model["coef"], X.T @ Y / len(Y), rtol=1e-12)
    assert out.loss == 7.0 + len(Y)  # neither the pass nor a final pass summed loss()


def test_update_returns_the_model_or_the_model_and_its_loss():
    from learnedidx.errors import DSLError
    with pytest.raises(DSLError, match="the model and its loss"):
        compile_algorithm("three", "def acc_s(w, x, y):\n    return x\ndef update(w, s):\n    return s, 1.0, 2.0\n")
    with pytest.raises(DSLError, match="Tuple is not allowed"):
        compile_algorithm("elsewhere", "def gradient(w, x, y):\n    return (x, y)\n")


@pytest.mark.parametrize("values", [[1.0, 0.0, 1.0], [3.0, 3.0], [1.0, 2.0, 3.0], [], [-1.0, 5.0, 5.0, -1.0],
                                    [2.0, 2.0, 2.0, 7.0], [0.5, 0.25, 0.5, 0.125]])
def test_two_label_values_are_found_as_unique_finds_them(values):
    from learnedidx.indb.runtime.data import two_values
    got, want = two_values(np.array(values)), np.unique(values)
    if len(want) == 2:
        np.testing.assert_array_equal(got, want)
    else:
        assert got is None
