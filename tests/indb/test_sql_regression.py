"""The extension's regression suite: extension/sql/*.sql, whose output must equal
extension/expected/*.out.

``test_sql_regression`` feeds each script to psql as pg_regress does (same options, same
database settings, input on stdin), so one set of expected files serves both this test and
``make installcheck``; tests/indb/test_extension_package.py runs the suite through PGXS's
``make installcheck`` from an installed package's copy, as every contrib module's suite runs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.pgfixtures import PG_BINDIR

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]
SQL_DIR = REPO / "extension"
CASES = sorted((SQL_DIR / "sql").glob("*.sql"))
PG_CONFIG = Path(PG_BINDIR) / "pg_config"

# What pg_regress sets for every database it creates (src/test/regress/pg_regress.c).
REGRESS_DATABASE_SETTINGS = {"lc_messages": "C", "lc_monetary": "C", "lc_numeric": "C", "lc_time": "C",
                             "bytea_output": "hex", "timezone_abbreviations": "Default"}


def run_psql(conn, script: Path, socket_path: str) -> str:
    """Run ``script`` as pg_regress runs a test: ``psql -X -a -q`` with the script on stdin (the
    scripts that train find the accelerator server through $LEARNEDIDX_SOCKET)."""
    info = conn.info
    env = {**os.environ, "PGHOST": info.host, "PGPORT": str(info.port), "PGUSER": info.user,
           "PGTZ": "PST8PDT", "PGDATESTYLE": "Postgres, MDY", "PGAPPNAME": f"pg_regress/{script.stem}",
           "LEARNEDIDX_SOCKET": socket_path}
    cmd = [str(Path(PG_BINDIR) / "psql"), "-X", "-a", "-q", "-d", info.dbname,
           "-v", "HIDE_TABLEAM=on", "-v", "HIDE_TOAST_COMPRESSION=on"]
    with script.open() as stdin:
        res = subprocess.run(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, timeout=60)
    return res.stdout


@pytest.mark.parametrize("script", CASES, ids=[c.stem for c in CASES])
def test_sql_regression(postgresql, accel_server, script, tmp_path):
    postgresql.autocommit = True
    for name, value in REGRESS_DATABASE_SETTINGS.items():
        postgresql.execute(f'ALTER DATABASE "{postgresql.info.dbname}" SET {name} TO \'{value}\'')
    actual = run_psql(postgresql, script, accel_server.socket_path)
    (tmp_path / f"{script.stem}.out").write_text(actual)  # to diff against, or to adopt after review
    expected_file = SQL_DIR / "expected" / f"{script.stem}.out"
    assert expected_file.exists(), f"no expected output; actual is in {tmp_path}"
    assert actual == expected_file.read_text(), f"output differs; actual is in {tmp_path}"


def pgxs_or_skip() -> None:
    pgxs = subprocess.run([str(PG_CONFIG), "--pgxs"], capture_output=True, text=True).stdout.strip()
    if not (pgxs and Path(pgxs).exists() and shutil.which("make")):
        pytest.skip("PGXS (Debian postgresql-server-dev-15) and make are needed")
