"""End-to-end SQL training through the extension and the accelerator server, against scikit-learn."""
from __future__ import annotations

import numpy as np
import psycopg
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import LinearRegression


def _load_diabetes(conn) -> tuple[np.ndarray, np.ndarray]:
    X, y = load_diabetes(return_X_y=True)
    conn.execute("CREATE TABLE diab (id int, y float8, features float8[])")
    with conn.cursor().copy("COPY diab FROM STDIN") as cp:
        for i, (row, t) in enumerate(zip(X, y)):
            cp.write_row((i, float(t), [float(v) for v in row]))
    return X, y


def test_linregr_matches_sklearn_and_predicts(db):
    X, y = _load_diabetes(db)
    db.execute("INSERT INTO diab VALUES (-1, NULL, ARRAY[1,2,3,4,5,6,7,8,9,10]::float8[])")
    res = db.execute("SELECT coef, num_rows_processed, num_rows_skipped FROM "
                     "learnedidx.linregr_train('diab', 'diab_model', 'y', 'features')").fetchone()
    ref = LinearRegression().fit(X, y)
    coef = np.asarray(res[0])
    assert np.allclose(coef[0], ref.intercept_, rtol=1e-4, atol=1e-3)
    assert np.allclose(coef[1:], ref.coef_, rtol=1e-4, atol=1e-2)
    assert res[1] == len(y) and res[2] == 1
    row = db.execute("SELECT algorithm, indep, num_rows_skipped FROM learnedidx.models WHERE name='diab_model'").fetchone()
    assert row == ("linregr", ["features"], 1)
    pred = db.execute("SELECT learnedidx.predict('diab_model', features) FROM diab WHERE id = 0").fetchone()[0]
    assert pred == pytest.approx(ref.predict(X[:1])[0], rel=1e-4)
    assert db.execute("SELECT coef IS NOT NULL FROM diab_model").fetchone()[0]


def test_missing_table_is_clear_error_without_catalog_row(db):
    with pytest.raises(psycopg.errors.UndefinedTable, match="nope"):
        db.execute("SELECT * FROM learnedidx.linregr_train('nope', 'm1', 'y', 'features')")
    assert db.execute("SELECT count(*) FROM learnedidx.models").fetchone()[0] == 0


def test_server_down_names_the_socket(db, tmp_path):
    _load_diabetes(db)
    db.execute("SELECT set_config('learnedidx.socket', %s, false)", (str(tmp_path / "none.sock"),))
    with pytest.raises(psycopg.errors.ConnectionFailure, match="none.sock"):
        db.execute("SELECT * FROM learnedidx.linregr_train('diab', 'm2', 'y', 'features')")
    assert db.execute("SELECT count(*) FROM learnedidx.models").fetchone()[0] == 0
