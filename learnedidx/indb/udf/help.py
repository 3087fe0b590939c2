"""The help of the public training and prediction functions, as MADlib's functions give it:
``fn()`` a summary, ``fn('usage')`` the arguments and output, ``fn('example')`` a session to
copy; any other message says how to ask.  The SQL wrappers (``learnedidx.linregr_train()``,
``learnedidx.linregr_train(message text)``, ...) call :func:`text` through ``learnedidx._help``.
"""
from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    summary: str
    usage: str
    example: str


_LINREGR_OUT = """The output table (one row per group with grouping_cols, the grouping columns first):
    coef, r2, std_err, t_stats, p_values, condition_no, [bp_stats, bp_p_value,]
    num_rows_processed, num_missing_rows_skipped, variance_covariance, train_seconds, accel_seconds
and out_table_summary: method, source_table, out_table, dependent_varname, independent_varname,
    num_rows_processed, num_missing_rows_skipped, grouping_col, then learnedidx's columns."""

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
        "svm_classification: a linear SVM classifier (MADlib's arguments and params).",
        """SELECT learnedidx.svm_classification(
    source_table        TEXT,  -- a table, view or query
    model_table         TEXT,  -- the model's table (and model_table_summary)
    dependent_varname   TEXT,  -- the label: two values
    independent_varname TEXT,  -- an array column or 'ARRAY[x1, x2]'
    kernel_func         TEXT,  -- optional ('linear')
    kernel_params       TEXT,  -- optional: 'fit_intercept=true'
    grouping_col        TEXT,  -- optional: one model per group
    params              TEXT,  -- optional: 'init_stepsize=0.01, max_iter=100, lambda=0.01, tolerance=1e-10'
    verbose             BOOLEAN
);
The output table: coef, loss, norm_of_gradient, num_iterations, num_rows_processed,
    num_rows_skipped, dep_var_mapping, train_seconds, accel_seconds.""",
        """SELECT learnedidx.svm_classification('houses', 'houses_svm', 'price > 100000', 'ARRAY[tax, bath, size]',
                                     'linear', 'fit_intercept=true', NULL, 'max_iter=50');
SELECT learnedidx.predict('houses_svm', ARRAY[tax, bath, size]) FROM houses;"""),
    "svm_regression": Entry(
        "svm_regression: a linear support vector regression (MADlib's arguments and params).",
        """SELECT learnedidx.svm_regression(source_table, model_table, dependent_varname, independent_varname
    [, kernel_func [, kernel_params [, grouping_col [, params [, verbose]]]]]);
params: MADlib's 'init_stepsize=..., max_iter=..., lambda=..., epsilon=...'.""",
        """SELECT learnedidx.svm_regression('houses', 'houses_svr', 'price', 'ARRAY[tax, bath, size]');"""),
    "svm_one_class": Entry(
        "svm_one_class: a one-class SVM (MADlib's arguments and params).",
        """SELECT learnedidx.svm_one_class(source_table, model_table, independent_varname
    [, kernel_func [, kernel_params [, grouping_col [, params [, verbose]]]]]);""",
        """SELECT learnedidx.svm_one_class('houses', 'houses_1svm', 'ARRAY[tax, bath, size]');"""),
    "svm_predict": Entry(
        "svm_predict: an SVM model's predictions for the rows of a table (MADlib's).",
        """SELECT learnedidx.svm_predict(model_table, new_data_table, id_col_name, output_table);""",
        """SELECT learnedidx.svm_predict('houses_svm', 'houses', 'id', 'houses_svm_pred');"""),
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
        """SELECT learnedidx.linregr_predict(
    coef        FLOAT8[],  -- the coefficients (an output table's coef column)
    col_ind_var FLOAT8[]   -- the independent variables, as the model was trained ('ARRAY[1, x1, x2]')
);  -- FLOAT8""",
        """SELECT id, learnedidx.linregr_predict(m.coef, ARRAY[1, tax, bath, size]) FROM houses, houses_linregr m;"""),
    "logregr_predict": Entry(
        "logregr_predict: MADlib's logistic class prediction, coef . col_ind_var > 0.",
        """SELECT learnedidx.logregr_predict(
    coef        FLOAT8[],  -- the coefficients (an output table's coef column)
    col_ind_var FLOAT8[]   -- the independent variables, as the model was trained
);  -- BOOLEAN""",
        """SELECT id, learnedidx.logregr_predict(m.coef, ARRAY[1, treatment, trait_anxiety])
FROM patients, patients_logregr m;"""),
    "logregr_predict_prob": Entry(
        "logregr_predict_prob: MADlib's P(y = 1) = 1 / (1 + exp(-coef . col_ind_var)).",
        """SELECT learnedidx.logregr_predict_prob(
    coef        FLOAT8[],  -- the coefficients (an output table's coef column)
    col_ind_var FLOAT8[]   -- the independent variables, as the model was trained
);  -- FLOAT8""",
        """SELECT id, learnedidx.logregr_predict_prob(m.coef, ARRAY[1, treatment, trait_anxiety])
FROM patients, patients_logregr m;"""),
}


def text(function: str, message: str | None) -> str:
    """``function``'s help for ``message``: None or '' the summary, 'usage', 'example'."""
    entry = ENTRIES.get(function)
    if entry is None:
        return f"No help for {function}."
    asked = (message or "").strip().lower()
    if asked in ("", "help", "?"):
        return (f"{entry.summary}\n\nFor the arguments and output: SELECT learnedidx.{function}('usage');\n"
                f"For an example: SELECT learnedidx.{function}('example');")
    if asked in ("usage", "use"):
        return entry.usage
    if asked in ("example", "examples"):
        return entry.example
    return f'No such option. Use "SELECT learnedidx.{function}()" for help.'
