"""The sql/ regression suite: each sql/input/*.sql runs through psql; output must equal sql/expected/*.out."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.pgfixtures import PG_BINDIR

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"
CASES = sorted((SQL_DIR / "input").glob("*.sql"))


def run_psql(conn, script: Path) -> str:
    """Run ``script`` with psql against ``conn``'s database, echoing statements (like pg_regress)."""
    info = conn.info
    cmd = [str(Path(PG_BINDIR) / "psql"), "-X", "-a", "-q", "-h", info.host, "-p", str(info.port),
           "-U", info.user, "-d", info.dbname, "-f", str(script)]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    # psql prefixes errors with the script path; make the output location-independent.
    return res.stdout.replace(f"psql:{script}", f"psql:{script.name}")


@pytest.mark.parametrize("script", CASES, ids=[c.stem for c in CASES])
def test_sql_regression(postgresql, script, tmp_path):  # noqa: F811
    postgresql.autocommit = True
    actual = run_psql(postgresql, script)
    (tmp_path / f"{script.stem}.out").write_text(actual)  # to diff against, or to adopt after review
    expected_file = SQL_DIR / "expected" / f"{script.stem}.out"
    assert expected_file.exists(), f"no expected output; actual is in {tmp_path}"
    assert actual == expected_file.read_text(), f"output differs; actual is in {tmp_path}"
