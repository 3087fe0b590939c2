"""linregr's statistics, computed by the database from the server's states.

The server replies each linregr model's state: the R factor of its rows [X y], in the bytes of
MADlib's linregr aggregate state (``learnedidx.bytea8``, see ``extension/linregr.c``).  The
extension's ``linregr_final`` (the aggregate's final function) computes MADlib's result from it,
and ``hetero_linregr_final`` the Breusch-Pagan test from the squared residuals' state: one
implementation of the statistics, for the aggregate and for ``linregr_train``.
"""
from __future__ import annotations

import base64
from typing import Any

from learnedidx.errors import ProtocolError
from learnedidx.indb.udf.session import Session

#: The statements of the statistics, prepared once per session.
STATEMENTS = {
    "linregr_final": ("SELECT (r).coef, (r).r2, (r).std_err, (r).t_stats, (r).p_values, (r).condition_no, "
                      "(r).vcov AS variance_covariance FROM (SELECT learnedidx.linregr_final($1) AS r) AS f",
                      ["learnedidx.bytea8"]),
    "hetero_final": ("SELECT (r).bp_stats, (r).bp_p_value FROM (SELECT learnedidx.hetero_linregr_final($1) AS r) "
                     "AS f", ["learnedidx.bytea8"]),
}


def _state(stats: dict, key: str) -> str:
    """A state of the reply as bytea8's input text."""
    try:
        return "\\x" + base64.b64decode(stats.pop(key), validate=True).hex()
    except (KeyError, ValueError, TypeError):
        raise ProtocolError(f"the server's linregr reply has no valid {key} for the output table") from None


def linregr_statistics(db: Session, results: list[dict], hetero: bool) -> None:
    """Fill each trained group's statistics (and its coefficients) from its states, in place."""
    for g in results:
        if g["model"] is None:
            continue
        stats: dict[str, Any] = g["stats"]
        row = db.one("linregr_final", _state(stats, "state"))
        g["model"]["coef"] = row.pop("coef")
        stats.update(row)
        if hetero:
            stats.update(db.one("hetero_final", _state(stats, "hetero_state")))
