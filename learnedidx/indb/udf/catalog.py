"""What the extension's SQL functions and the accelerator server agree on: the built-in
algorithms (the server trains them, user algorithms may not take their names), which of them
train one model per group, the readers, and the columns of each algorithm's output table, as
MADlib names and orders them (then ours), filled by name from the server's statistics."""
from __future__ import annotations

#: The built-in algorithms (learnedidx.indb.runtime compiles one DSL source per name).
BUILTINS = ("linregr", "logregr", "svm", "lmf")
#: Those that train one model per group of rows (MADlib's grouping_cols).
GROUPABLE = ("linregr", "logregr", "svm")
#: Those that train over shards, merging the shards' statistics exactly (docs/indb.md, "Training
#: over shards"); the others read a partitioned table's rows through postgres_fdw.
SHARDED = ("linregr", "logregr")
#: learnedidx.reader's values (and their old names) -> the reader they mean.
READERS = {"auto": "auto", "pages": "pages", "query": "query", "strider": "pages", "copy": "query"}

F8, F8A, I8, I8A, I4, TEXT = ("pg_catalog.float8", "pg_catalog.float8[]", "pg_catalog.int8", "pg_catalog.int8[]",
                              "pg_catalog.int4", "pg_catalog.text")
#: The output table of each algorithm (None: a registered DSL algorithm): MADlib's columns, in
#: MADlib's order, then ours.
COLUMNS: dict[str | None, list[tuple[str, str]]] = {
    "linregr": [("coef", F8A), ("r2", F8), ("std_err", F8A), ("t_stats", F8A), ("p_values", F8A),
                ("condition_no", F8), ("num_rows_processed", I8), ("num_missing_rows_skipped", I8),
                ("variance_covariance", F8A)],
    "logregr": [("coef", F8A), ("log_likelihood", F8), ("std_err", F8A), ("z_stats", F8A), ("p_values", F8A),
                ("odds_ratios", F8A), ("condition_no", F8), ("num_rows_processed", I8),
                ("num_missing_rows_skipped", I8), ("num_iterations", I4), ("variance_covariance", F8A)],
    "svm": [("coef", F8A), ("loss", F8), ("norm_of_gradient", F8), ("num_iterations", I4),
            ("num_rows_processed", I8), ("num_rows_skipped", I8), ("dep_var_mapping", F8A)],
    "lmf": [("u", F8A), ("v", F8A), ("row_ids", I8A), ("col_ids", I8A), ("loss", F8), ("num_rows_processed", I8),
            ("num_rows_skipped", I8), ("num_iterations", I4)],
    None: [("coef", F8A), ("loss", F8), ("num_rows_processed", I8), ("num_rows_skipped", I8),
           ("num_iterations", I4)],
}
#: linregr's columns of the Breusch-Pagan test (heteroskedasticity_option), after condition_no.
HETERO = [("bp_stats", F8), ("bp_p_value", F8)]
#: The columns every output table ends with.
TIMES = [("train_seconds", F8), ("accel_seconds", F8)]


def columns(algorithm: str, hetero: bool = False) -> list[tuple[str, str]]:
    """The model columns of ``algorithm``'s output table (a user algorithm's: the DSL's); with
    ``hetero``, linregr's Breusch-Pagan columns after condition_no, where MADlib puts them."""
    cols = COLUMNS[algorithm if algorithm in BUILTINS else None]
    if hetero:
        at = [c for c, _ in cols].index("condition_no") + 1
        cols = cols[:at] + HETERO + cols[at:]
    return cols
