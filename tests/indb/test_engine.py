"""Engine vs scikit-learn oracles, determinism, bad data and DSL validation."""
import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.preprocessing import StandardScaler

from learnedidx.errors import DSLDivisionByZeroError, InDBError, ParameterError
from learnedidx.indb import runtime


def test_linregr_matches_sklearn_on_diabetes():
    X, y = load_diabetes(return_X_y=True)
    out = runtime.train("linregr", {"X": X, "y": y}, threads=2)
    ref = LinearRegression().fit(X, y)
    np.testing.assert_allclose(out.model["coef"][0], ref.intercept_, rtol=1e-8)
    np.testing.assert_allclose(out.model["coef"][1:], ref.coef_, rtol=1e-6, atol=1e-6)


def test_logregr_matches_sklearn_on_breast_cancer_subset():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X[:, :5])
    out = runtime.train("logregr", {"X": X, "y": y.astype(float)}, {"max_iter": 50}, threads=2)
    ref = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10000).fit(X, y)  # unpenalized
    np.testing.assert_allclose(out.model["coef"][1:], ref.coef_[0], rtol=1e-3, atol=1e-3)
    p = runtime.predict_proba("logregr", out.model, X)
    np.testing.assert_allclose(p, ref.predict_proba(X)[:, 1], atol=1e-4)


def test_svm_accuracy_on_breast_cancer_and_determinism():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    a = runtime.train("svm", {"X": X, "y": y.astype(float)}, threads=2, seed=3)
    b = runtime.train("svm", {"X": X, "y": y.astype(float)}, threads=2, seed=3)
    assert np.array_equal(a.model["coef"], b.model["coef"])
    acc = np.mean(runtime.predict("svm", a.model, X) == y)
    assert acc > 0.95


def test_lmf_recovers_low_rank_matrix():
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(60, 3)), rng.normal(size=(40, 3))
    r, c = np.nonzero(rng.random((60, 40)) < 0.5)
    vals = np.einsum("ij,ij->i", U[r], V[c])
    out = runtime.train("lmf", {"row": r, "col": c, "value": vals},
                       {"rank": 3, "stepsize": 0.02, "lambda": 0.0, "max_iter": 200}, threads=1)
    pred = np.einsum("ij,ij->i", out.model["u"][r], out.model["v"][c])
    assert np.sqrt(np.mean((pred - vals) ** 2)) < 0.3 * np.std(vals)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_inf_rejected(bad):
    X = np.ones((10, 2))
    X[3, 1] = bad
    with pytest.raises(InDBError):
        runtime.train("linregr", {"X": X, "y": np.ones(10)})


def test_empty_rejected():
    with pytest.raises(InDBError):
        runtime.train("linregr", {"X": np.empty((0, 2)), "y": np.empty(0)})


@pytest.mark.parametrize("src", ["import os", "x = ().__class__", "def update(:", "y = open('f')"])
def test_bad_dsl_rejected(src):
    with pytest.raises(InDBError):
        runtime.register_algorithm("bad", src)


def test_cycle_model_sanity():
    from learnedidx.accel.engine_model import modelled_cycles

    newton, sgd = runtime.builtin("logregr").cost, runtime.builtin("svm").cost
    assert newton.matrix_ops and newton.solve and newton.nonlinear and not sgd.matrix_ops
    base = modelled_cycles(newton, 10_000, 54, 1, units=4)
    assert modelled_cycles(newton, 10_000, 54, 1, units=8) < base
    assert modelled_cycles(newton, 20_000, 54, 1, units=4) > base
    assert modelled_cycles(newton, 10_000, 100, 1, units=4) > base
    assert modelled_cycles(sgd, 10_000, 54, 1, units=4) < base  # no d² accumulation


USER_LOGREGR = '''
epochs = 200
learning_rate = 0.5
schedule = "constant"
batch_size = 16
tolerance = 0.0

def gradient(w, x, y):
    return (sigmoid(dot(w, x)) - y) * x
'''


def test_user_dsl_logregr_agrees_with_builtin():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X[:, :5])
    runtime.register_algorithm("user_logregr_t", USER_LOGREGR)
    user = runtime.train("user_logregr_t", {"X": X, "y": y.astype(float)}, threads=2)
    ref = runtime.train("logregr", {"X": X, "y": y.astype(float)}, {"max_iter": 50}, threads=2)
    agree = np.mean(runtime.predict("logregr", user.model, X) == runtime.predict("logregr", ref.model, X))
    assert agree > 0.95  # measured 0.968 (SGD vs Newton near the boundary)


def test_dsl_merge_sum_and_checked_settings():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X[:, :5])
    alg = runtime.register_algorithm("user_logregr_sum", USER_LOGREGR.replace("epochs = 200", "epochs = 30")
                                    + 'merge = "sum"\n')
    out = runtime.train(alg, {"X": X, "y": y.astype(float)}, threads=2)
    ref = runtime.train("logregr", {"X": X, "y": y.astype(float)}, {"max_iter": 50}, threads=2)
    agree = np.mean(runtime.predict("logregr", out.model, X) == runtime.predict("logregr", ref.model, X))
    assert agree > 0.95
    assert runtime.register_algorithm("user_logregr_sum", alg.source) is alg  # unchanged: not recompiled
    with pytest.raises(InDBError, match="merge must be one of"):
        runtime.register_algorithm("bad_merge", USER_LOGREGR + 'merge = "median"\n')
    with pytest.raises(InDBError, match="schedule must be one of"):
        runtime.train(alg, {"X": X, "y": y.astype(float)}, {"schedule": "cosine"})
    with pytest.raises(InDBError, match="epochs must be an integer"):
        runtime.train(alg, {"X": X, "y": y.astype(float)}, {"epochs": "many"})


def test_builtins_are_dsl_and_user_accumulators_match_them():
    from learnedidx.indb.runtime.builtins import SOURCES

    assert {runtime.builtin(a).form for a in runtime.ALGORITHMS} == {"accumulate", "sgd", "factor"}
    X, y = load_diabetes(return_X_y=True)
    user = runtime.register_algorithm("user_linregr", SOURCES["linregr"])  # a built-in's source, as a user's
    a = runtime.train(user, {"X": X, "y": y}, threads=3)
    b = runtime.train("linregr", {"X": X, "y": y}, threads=2)
    np.testing.assert_allclose(a.model["coef"], b.model["coef"], rtol=1e-9)
    assert a.modelled_seconds > 0 and a.iterations == 1


@pytest.mark.parametrize("src,match", [
    ("def acc_s(w, x, y):\n    return dot(w, x)\n", "update"),
    ("def acc_s(w, x, y):\n    return 1.0\ndef update(w, t):\n    return w\n", "update takes"),
    ("def gradient(w, x, y):\n    return solve(x, x)\n", "update only"),
    ("def gradient_u(u, v, y):\n    return v\n", "factor"),
    ("def gradient(w, x, y):\n    return x\ndef update(w):\n    return w\n", "accumulators"),
])
def test_bad_dsl_shapes_rejected(src, match):
    with pytest.raises(InDBError, match=match):
        runtime.register_algorithm("bad_shape", src)


def test_update_must_return_the_model():
    X, y = load_diabetes(return_X_y=True)
    alg = runtime.register_algorithm("bad_update", "def acc_s(w, x, y):\n    return y\n"
                                    "def update(w, s, n):\n    return s / n\n")
    with pytest.raises(InDBError, match="update must return the model"):
        runtime.train(alg, {"X": X, "y": y})


def test_update_divides_by_zero_as_the_per_tuple_functions_do():
    """A division by a zero number raises DSLDivisionByZeroError (22012) in update as in the
    per-tuple functions, which Numba compiles (update once gave inf on numpy's int64 literals:
    ``w + 1 / 0``); arrays divide elementwise in both, their zeros giving inf and NaN."""
    X, y = load_diabetes(return_X_y=True)
    acc = "epochs = 1\ndef acc_s(w, x, y):\n    return (y - y) * x\ndef update(w, n, s):\n    return {}\n"
    for name, update in (("int_zero", "w + 1 / 0"), ("float_zero", "w + 1.0 / 0"), ("zero_zero", "w + 0 / 0"),
                         ("n_zero", "w + s / (n - n)")):
        with pytest.raises(DSLDivisionByZeroError, match="update: division by zero"):
            runtime.train(runtime.register_algorithm(f"div_{name}", acc.format(update)), {"X": X, "y": y})
    # the oracle: Numba's own division, on the first tuple (which types the kernel) and on a later one
    for name, zero in (("first", "(y - y)"), ("later", "(y - 75.0)")):
        with pytest.raises(DSLDivisionByZeroError, match="division by zero"):
            runtime.train(runtime.register_algorithm(f"div_tuple_{name}", "epochs = 1\ndef gradient(w, x, y):\n"
                                                     f"    return (1.0 / {zero}) * x\n"), {"X": X, "y": y})
    out = runtime.train(runtime.register_algorithm("div_arrays", acc.format("w + s / s")), {"X": X, "y": y})
    assert np.all(np.isnan(out.model["coef"]))  # 0 / 0 elementwise, as numpy and Numba divide arrays


@pytest.mark.parametrize("change,match", [
    ({"lambda": 0.1}, "lambda must be a list of values"),
    ({"lambda": [-1.0]}, "lambda must be at least 0"),
    ({"init_stepsize": [0.0]}, "init_stepsize must be greater than 0"),
    ({"max_iter": [0]}, "max_iter must be at least 1"),
    ({"decay_factor": [1.5]}, "decay_factor must be at most 1"),
    ({"norm": "l3"}, "norm must be l1 or l2"),
    ({"class_weight": {"2": 1.0}}, "class_weight must be balanced or the weights"),
    ({"svc": "yes"}, "svc must be true or false"),
    ({"lambda": [0.1, 1.0]}, "lists of several values need n_folds of 2 or more"),
    ({"tolerance": float("nan")}, "tolerance must be at least 0 and finite"),
])
def test_madlib_svm_settings_are_checked_by_the_server(change, match):
    """The server checks the settings of MADlib's svm itself (any process of its OS user may
    send a request), before reading any row."""
    from learnedidx.indb.runtime import svm_igd
    good = {"init_stepsize": [0.01], "decay_factor": [0.9], "max_iter": [5], "lambda": [0.01], "epsilon": [0.1],
            "tolerance": 0.0, "norm": "l2", "n_folds": 0, "svc": True}
    assert svm_igd.check(good)["fold_class_weight"] is None
    with pytest.raises(ParameterError, match=match):
        svm_igd.check({**good, **change})
