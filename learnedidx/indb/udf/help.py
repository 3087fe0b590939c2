"""The help of the public training and prediction functions, as MADlib's functions give it:
``fn()`` a summary, ``fn('usage')`` the arguments and output, ``fn('example')`` a session to
copy, and for MADlib's svm functions ``fn('params')``, ``fn('gaussian')`` and
``fn('polynomial')`` (their params and the kernels' kernel_params); any other message says how
to ask.  The SQL wrappers (``learnedidx.linregr_train()``, ``learnedidx.linregr_train(message
text)``, ...) call :func:`text` through ``learnedidx._help``.
"""
from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    summary: str
    usage: str
    example: str
    #: the other messages the function answers: message -> (what it tells, its text)
    more: dict[str, tuple[str, str]] | None = None


_LINREGR_OUT = """The output table (one row per group with grouping_cols, the grouping columns first):
    coef, r2, std_err, t_stats, p_values, condition_no, [bp_stats, bp_p_value,]
    num_rows_processed, num_missing_rows_skipped, variance_covariance, train_seconds, accel_seconds
and out_table_summary: method, source_table, out_table, dependent_varname, independent_varname,
    num_rows_processed, num_missing_rows_skipped, grouping_col, then learnedidx's columns."""

_SVM_PARAMS = """params: name=value pairs, comma-separated (given twice, a name's last value
counts).  A list, [a, b] or {a, b}, gives cross validation's candidates: with n_folds of 2 or
more each candidate trains on all folds but one and is scored on it, and the best trains the
model.

    init_stepsize      -- 0.01: the first iteration's step size (> 0); a list
    decay_factor       -- 0.9: the step size's factor after each iteration; 0 or less:
                          init_stepsize / (t + 1) after iteration t (at most 1); a list
    max_iter           -- 100: the most iterations (1 or more); a list
    tolerance          -- 1e-10: stop when the loss changed by less than this, relatively
    lambda             -- 0.01: the regularization's weight (0 or more); a list
    norm               -- L2: the regularization, L2 or L1
    epsilon            -- 0.01: svm_regression ignores errors this small (0 or more); a list
    eps_table          -- none: with grouping, a table of the grouping columns and epsilon,
                          each group's own epsilon
    class_weight       -- none (svm_one_class: balanced): balanced, or {label: weight, ...};
                          a row's step is scaled by its label's weight
    n_folds            -- 0: cross validation's folds, 2 or more to run it
    validation_result  -- none: a table for each candidate's mean score and its deviation"""

_SVM_GAUSSIAN = """kernel_params of the gaussian kernel exp(-gamma ||x - y||^2), which the model
approximates by random Fourier features: name=value pairs, comma-separated.

    n_components   -- max(100, 2 * features): how many random features
    gamma          -- 1 / features: the kernel's width (> 0)
    random_state   -- 1: the seed of the random features (kept in model_table_random)
    fit_intercept  -- false: add an intercept, the last coefficient
    fit_in_memory  -- true: false draws the random weights feature by feature, as MADlib does
                      when they do not fit in memory"""

_SVM_POLYNOMIAL = """kernel_params of the polynomial kernel (x . y + coef0)^degree, which the model
approximates by random Maclaurin features: name=value pairs, comma-separated.

    n_components   -- max(100, 2 * features): how many random features
    degree         -- 3: the kernel's power (1 or more)
    coef0          -- 1: the kernel's constant term (0 or more; 0: the homogeneous kernel)
    random_state   -- 1: the seed of the random features (kept in model_table_random)
    fit_intercept  -- false: add an intercept, the last coefficient"""

_SVM_MORE = {"params": ("params", _SVM_PARAMS), "gaussian": ("the gaussian kernel's kernel_params", _SVM_GAUSSIAN),
             "polynomial": ("the polynomial kernel's kernel_params", _SVM_POLYNOMIAL)}


def _svm_usage(fn: str, dep: str | None) -> str:
    """The usage of MADlib's svm training function ``fn`` (``dep``: its dependent_varname's
    meaning; None: svm_one_class's, which takes none)."""
    one_class = dep is None
    dep_line = "" if one_class else "    dependent_varname   TEXT,     -- %s\n" % dep
    return """SELECT learnedidx.{fn}(
    source_table        TEXT,     -- a table, view or query
    model_table         TEXT,     -- the model's table (and model_table_summary); must not exist
{dep}    independent_varname TEXT,     -- an array column or 'ARRAY[x1, x2]' (a listed 1 is a feature)
    kernel_func         TEXT,     -- optional ({kernel}): 'linear', 'gaussian' or 'polynomial' (or a prefix)
    kernel_params       TEXT,     -- optional: SELECT learnedidx.{fn}('gaussian'), ('polynomial'){fit}
    grouping_col        TEXT,     -- {grouping}
    params              TEXT,     -- optional: SELECT learnedidx.{fn}('params')
    verbose             BOOLEAN   -- optional, accepted and ignored
);
The model table (one row per group, the grouping columns first): coef, loss, norm_of_gradient,
    num_iterations, num_rows_processed, num_rows_skipped, dep_var_mapping, train_seconds,
    accel_seconds
model_table_summary: method, version_number, source_table, model_table, dependent_varname,
    independent_varname, kernel_func, kernel_params, grouping_col, optim_params, reg_params,
    num_all_groups, num_failed_groups, total_rows_processed, total_rows_skipped, then
    learnedidx's columns
model_table_random (a gaussian or polynomial kernel): the random features, which svm_predict
    reads; and validation_result's table with cross validation.
Scoring: SELECT learnedidx.svm_predict('usage');""".format(
        fn=fn, dep=dep_line, kernel="'gaussian'" if one_class else "'linear'",
        fit="; the intercept is always fitted" if one_class else "",
        grouping="optional, NULL: one model (svm_one_class trains one)" if one_class else
        "optional: columns of the source, one model per group")


def _over_coef(fn: str, returns: str, form: str = "") -> str:
    """The usage of MADlib's function ``fn`` over an output table's coefficients."""
    return f"""SELECT learnedidx.{fn}(
    coef        FLOAT8[],  -- the coefficients (an output table's coef column)
    col_ind_var FLOAT8[]   -- the independent variables, as the model was trained{form}
);  -- {returns}"""


ENTRIES: dict[str, Entry] = {
    "linregr_train": Entry(
        "linregr_train: ordinary least squares (MADlib's linear regression), trained by the learnedidx\n"
        "accelerator server from the R factor of the rows (Householder QR, never X'X), with MADlib's\n"
        "statistics; optionally the Breusch-Pagan test for heteroskedasticity.",
        """SELECT learnedidx.linregr_train(
    source_table              TEXT,     -- a table, view or query ('SELECT ...')
    out_table                 TEXT,     -- the model's table (and out_table_summary); must not exist
    dependent_varname         TEXT,     -- a column or SQL expression of the source
    independent_varname       TEXT,     -- 'ARRAY[1, x1, x2]' (1: the intercept), an array column, or 'x1, x2'
    grouping_cols             TEXT,     -- optional: columns or expressions, one model per group
    heteroskedasticity_option BOOLEAN,  -- optional (false): add bp_stats and bp_p_value
    "intercept"               BOOLEAN   -- optional (true): fit an intercept when indep states none
);
""" + _LINREGR_OUT + """
The aggregate: SELECT (learnedidx.linregr(y, ARRAY[1, x1, x2])).* FROM t;""",
        """CREATE TABLE houses (id int, tax int, bedroom int, bath float8, price int, size int);
INSERT INTO houses VALUES (1, 590, 2, 1, 50000, 770), (2, 1050, 3, 2, 85000, 1410),
    (3, 20, 3, 1, 22500, 1060), (4, 870, 2, 2, 90000, 1300), (5, 1320, 3, 2, 133000, 1500),
    (6, 1350, 2, 1, 90500, 820), (7, 2790, 3, 2.5, 260000, 2130), (8, 680, 2, 1, 142500, 1170);
SELECT learnedidx.linregr_train('houses', 'houses_linregr', 'price', 'ARRAY[1, tax, bath, size]');
SELECT coef, r2, p_values FROM houses_linregr;
SELECT id, learnedidx.linregr_predict(m.coef, ARRAY[1, tax, bath, size]) FROM houses, houses_linregr m;"""),
    "logregr_train": Entry(
        "logregr_train: binary logistic regression (MADlib's), with MADlib's optimizers 'irls',\n"
        "'cg' and 'igd', its stopping rule and its statistics at the coefficients returned.",
        """SELECT learnedidx.logregr_train(
    source_table        TEXT,     -- a table, view or query
    out_table           TEXT,     -- the model's table (and out_table_summary); must not exist
    dependent_varname   TEXT,     -- a boolean or 0/1 expression: 'second_attack', 'crimerat >= 110'
    independent_varname TEXT,     -- 'ARRAY[1, x1, x2]' (1: the intercept), an array column, or 'x1, x2'
    grouping_cols       TEXT,     -- optional: columns or expressions, one model per group
    max_iter            INTEGER,  -- optional (20)
    optimizer           TEXT,     -- optional ('irls'): 'irls' (or 'newton'), 'cg', 'igd'
    tolerance           FLOAT8,   -- optional (0.0001): stop when the log-likelihood changes less
    verbose             BOOLEAN   -- optional, accepted and ignored
);
The output table: coef, log_likelihood, std_err, z_stats, p_values, odds_ratios, condition_no,
    num_rows_processed, num_missing_rows_skipped, num_iterations, variance_covariance,
    train_seconds, accel_seconds
and out_table_summary (method, source_table, out_table, dependent_varname, independent_varname,
    optimizer_params, num_all_groups, num_failed_groups, num_rows_processed,
    num_missing_rows_skipped, grouping_col, then learnedidx's columns).""",
        """CREATE TABLE patients (id int, second_attack int, treatment int, trait_anxiety int);
INSERT INTO patients VALUES (1, 1, 1, 70), (2, 1, 1, 80), (3, 1, 1, 50), (4, 1, 0, 60),
    (5, 0, 1, 65), (6, 0, 1, 50), (7, 0, 0, 45), (8, 0, 0, 40), (9, 1, 0, 75), (10, 0, 1, 35);
SELECT learnedidx.logregr_train('patients', 'patients_logregr', 'second_attack',
                                'ARRAY[1, treatment, trait_anxiety]', NULL, 20, 'irls');
SELECT coef, log_likelihood, p_values, num_iterations FROM patients_logregr;
SELECT id, learnedidx.logregr_predict_prob(m.coef, ARRAY[1, treatment, trait_anxiety])
FROM patients, patients_logregr m;"""),
    "svm_classification": Entry(
        "svm_classification: MADlib's support vector machine classifier: two labels separated by a\n"
        "linear model of the features, or of a gaussian or polynomial kernel's random features,\n"
        "trained by the learnedidx accelerator server as MADlib trains it (incremental gradient\n"
        "descent, its params, class weights and cross validation).",
        _svm_usage("svm_classification", "the label: two values (numbers, booleans, text, ...)"),
        """SELECT learnedidx.svm_classification('houses', 'houses_svm', 'price < 100000',
                                     'ARRAY[tax, bath, size]', 'linear', 'fit_intercept=true');
SELECT learnedidx.svm_classification('houses', 'houses_svm_gaussian', 'price < 100000',
                                     'ARRAY[tax, bath, size]', 'gaussian', 'n_components=10', NULL,
                                     'init_stepsize=1, max_iter=200');
SELECT learnedidx.svm_predict('houses_svm_gaussian', 'houses', 'id', 'houses_pred');
SELECT h.id, p.prediction, h.price < 100000 AS target FROM houses h JOIN houses_pred p USING (id);""",
        _SVM_MORE),
    "svm_regression": Entry(
        "svm_regression: MADlib's support vector regression (errors within epsilon cost nothing), of\n"
        "the features or of a gaussian or polynomial kernel's random features, trained by the\n"
        "learnedidx accelerator server as MADlib trains it.",
        _svm_usage("svm_regression", "the value to predict: a number"),
        """SELECT learnedidx.svm_regression('houses', 'houses_svr', 'price', 'ARRAY[tax, bath, size]', 'linear',
                                 'fit_intercept=true', NULL, 'epsilon=1000, max_iter=50');
SELECT learnedidx.svm_predict('houses_svr', 'houses', 'id', 'houses_svr_pred');""",
        _SVM_MORE),
    "svm_one_class": Entry(
        "svm_one_class: MADlib's one-class support vector machine: the rows (+1) against the origin\n"
        "(-1), by default through a gaussian kernel, with balanced class weights; svm_predict then\n"
        "tells the rows like them (+1) from the others (-1).",
        _svm_usage("svm_one_class", None),
        """SELECT learnedidx.svm_one_class('houses', 'houses_1svm', 'ARRAY[tax, bath, size]', 'gaussian',
                                'gamma=0.5, n_components=20');
SELECT learnedidx.svm_predict('houses_1svm', 'houses', 'id', 'houses_1svm_pred');""",
        _SVM_MORE),
    "svm_predict": Entry(
        "svm_predict: a model of svm_classification, svm_regression or svm_one_class scoring the rows\n"
        "of a table (MADlib's): each row's decision function and prediction.",
        """SELECT learnedidx.svm_predict(
    model_table     TEXT,  -- the model's table (its _summary and, for a kernel, _random beside it)
    new_data_table  TEXT,  -- the rows to score: the model's independent_varname is evaluated on them
    id_col_name     TEXT,  -- the column of new_data_table identifying a row
    output_table    TEXT   -- created: must not exist
);
The output table: the id column, prediction (the label: dep_var_mapping[2] where the decision
function is 0 or more, else [1]; for regression the decision function), decision_function
(coef . the model's features), and with grouping grouping_col and the grouping columns; a row
with a NULL feature is left out.  It evaluates the model's independent_varname as the caller,
so only members of the model's owner role may call it.""",
        """SELECT learnedidx.svm_predict('houses_svm', 'houses', 'id', 'houses_pred');
SELECT * FROM houses_pred ORDER BY id;"""),
    "svm_train": Entry(
        "svm_train: learnedidx's linear SVM (lambda weighs ||w||^2 / 2 against the mean hinge loss).",
        """SELECT learnedidx.svm_train(source, out_table, dep, indep
    [, lambda => 0.0001, max_iter => 30, stepsize => 0.1, grouping_cols => NULL]);
The output table as svm_classification's.""",
        """SELECT learnedidx.svm_train('houses', 'houses_svm2', 'price > 100000', 'ARRAY[tax, bath, size]',
                            lambda => 0.001, max_iter => 20);"""),
    "lmf_train": Entry(
        "lmf_train: low-rank matrix factorization of (row, column, value) triples (MADlib's lmf_igd).",
        """SELECT learnedidx.lmf_train(source, out_table, col_row, col_column, col_value
    [, max_rank => 10, stepsize => 0.01, lambda => 0.01, num_iterations => 50, scale_factor => 0.1]);
The output table: u, v, row_ids, col_ids, loss (RMSE), num_rows_processed, num_rows_skipped,
    num_iterations, train_seconds, accel_seconds.""",
        """SELECT learnedidx.lmf_train('ratings', 'ratings_lmf', 'user_id', 'item_id', 'rating', max_rank => 5);
SELECT learnedidx.predict('ratings_lmf', ARRAY[user_id, item_id]) FROM ratings;"""),
    "train": Entry(
        "train: a registered DSL algorithm (learnedidx.register_algorithm), trained on a source.",
        """SELECT learnedidx.train(name, source, dep, indep [, params jsonb [, out_table]]);
params override the algorithm's settings (epochs, learning_rate, schedule, tolerance, l2, ...).""",
        """SELECT learnedidx.train('ridge', 'houses', 'price', 'ARRAY[tax, bath, size]', '{"epochs": 10}');"""),
    "predict": Entry(
        "predict: a model's prediction for one feature vector: the score (linregr, DSL models), the\n"
        "class 0/1 (logregr), the label (svm) or u[row] . v[column] (lmf); plain SQL, no server.",
        """SELECT learnedidx.predict(model regclass, features float8[] [, group values...]);
features may omit the leading 1 of a model with an intercept; given, it must be 1.  A model
trained with grouping_cols takes each group's value after the features.""",
        """SELECT learnedidx.predict('houses_linregr', ARRAY[tax, bath, size]) FROM houses;"""),
    "predict_proba": Entry(
        "predict_proba: P(y = 1) under a logregr model, for one feature vector.",
        """SELECT learnedidx.predict_proba(model regclass, features float8[] [, group values...]);""",
        """SELECT learnedidx.predict_proba('patients_logregr', ARRAY[treatment, trait_anxiety]) FROM patients;"""),
    "predict_table": Entry(
        "predict_table: CREATE TABLE out_table AS SELECT source.*, predict(model, features) AS prediction.",
        """SELECT learnedidx.predict_table(model regclass, source text, out_table text);""",
        """SELECT learnedidx.predict_table('houses_linregr', 'houses', 'houses_pred');"""),
    "linregr_predict": Entry(
        "linregr_predict: MADlib's linear prediction coef . col_ind_var, over an output table's coef.",
        _over_coef("linregr_predict", "FLOAT8", " ('ARRAY[1, x1, x2]')"),
        """SELECT id, learnedidx.linregr_predict(m.coef, ARRAY[1, tax, bath, size]) FROM houses, houses_linregr m;"""),
    "logregr_predict": Entry(
        "logregr_predict: MADlib's logistic class prediction, coef . col_ind_var > 0.",
        _over_coef("logregr_predict", "BOOLEAN"),
        """SELECT id, learnedidx.logregr_predict(m.coef, ARRAY[1, treatment, trait_anxiety])
FROM patients, patients_logregr m;"""),
    "logregr_predict_prob": Entry(
        "logregr_predict_prob: MADlib's P(y = 1) = 1 / (1 + exp(-coef . col_ind_var)).",
        _over_coef("logregr_predict_prob", "FLOAT8"),
        """SELECT id, learnedidx.logregr_predict_prob(m.coef, ARRAY[1, treatment, trait_anxiety])
FROM patients, patients_logregr m;"""),
}


def text(function: str, message: str | None) -> str:
    """``function``'s help for ``message``: None or '' the summary, 'usage', 'example'."""
    entry = ENTRIES.get(function)
    if entry is None:
        return f"No help for {function}."
    asked = (message or "").strip().lower()
    more = entry.more or {}
    if asked in ("", "help", "?"):
        return (f"{entry.summary}\n\nFor the arguments and output: SELECT learnedidx.{function}('usage');\n"
                f"For an example: SELECT learnedidx.{function}('example');"
                + "".join(f"\nFor {what}: SELECT learnedidx.{function}('{m}');" for m, (what, _) in more.items()))
    if asked in ("usage", "use"):
        return entry.usage
    if asked in ("example", "examples"):
        return entry.example
    if asked in more:
        return more[asked][1]
    return f'No such option. Use "SELECT learnedidx.{function}()" for help.'
