#!/usr/bin/env python3
"""Run MADlib's own install-check SQL files against MADlib or against learnedidx, the schema
renamed and nothing else changed: each statement runs in the file's order, as MADlib's
``madpack install-check`` runs it (in a fresh test schema, the search_path being that schema,
then the functions' schema), and is counted as passing or failing (an assertion that does not
hold fails its statement).  docs/indb.md, "MADlib's install-check", lists the results.

    PGHOST=... PGPORT=... PGDATABASE=... python scripts/madlib_installcheck.py \\
        --src MADLIB_SOURCE --schema learnedidx svm        # or --schema madlib

``MADLIB_SOURCE`` is MADlib's source tree (branch madlib2-master); the module's test files are
``src/ports/postgres/modules/<module>/test/*.sql_in``.  The database needs the extension (or
MADlib, installed with madpack) and, for learnedidx, its accelerator server.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import psycopg

#: The functions a statement calls that make it one of the file's tests.
TESTED = re.compile(r"\b(svm_classification|svm_regression|svm_one_class|svm_predict|linregr_train|linregr_predict|"
                    r"logregr_train|logregr_predict|logregr_predict_prob|linregr|assert)\s*\(", re.I)


def statements(text: str) -> list[tuple[str, list[str] | None]]:
    """The SQL statements of a psql script (comments, psql's backslash commands aside), each
    with the data lines that follow a ``COPY ... FROM stdin``."""
    out: list[tuple[str, list[str] | None]] = []
    cur: list[str] = []
    i, n = 0, len(text)
    lines_after = None
    while i < n:
        ch = text[i]
        if ch == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if ch == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if ch == "\\" and not "".join(cur).strip():  # a psql command on its own line
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if ch == "'":
            j = i + 1
            while j < n and not (text[j] == "'" and not text.startswith("''", j)):
                j += 2 if text.startswith("''", j) else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if ch == "$":
            m = re.match(r"\$[A-Za-z_]*\$", text[i:])
            if m:
                end = text.find(m.group(0), i + len(m.group(0)))
                end = n if end < 0 else end + len(m.group(0))
                cur.append(text[i:end])
                i = end
                continue
        if ch == ";":
            stmt = "".join(cur).strip()
            cur = []
            i += 1
            data = None
            if re.search(r"\bcopy\b.*\bfrom\s+stdin", stmt, re.I | re.S):
                j = text.find("\n", i)
                end = text.find("\n\\.", j)
                data = text[j + 1:end].splitlines()
                i = end + 3
            if stmt:
                out.append((stmt, data))
            continue
        cur.append(ch)
        i += 1
    if "".join(cur).strip():
        out.append(("".join(cur).strip(), lines_after))
    return out


def run_file(conn: psycopg.Connection, path: Path, schema: str, test_schema: str) -> list[tuple[str, str | None]]:
    """Each statement of ``path`` and its error (None when it ran)."""
    conn.execute(f"DROP SCHEMA IF EXISTS {test_schema} CASCADE")
    conn.execute(f"CREATE SCHEMA {test_schema}")
    conn.execute(f"SET search_path = {test_schema}, {schema}")
    results = []
    for sql, data in statements(path.read_text()):
        try:
            if data is not None:
                with conn.cursor().copy(sql) as cp:
                    for line in data:
                        cp.write(line + "\n")
            else:
                conn.execute(sql)
            results.append((sql, None))
        except psycopg.Error as e:
            results.append((sql, f"{e.sqlstate}: {str(e).splitlines()[0]}"))
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="MADlib's source tree")
    ap.add_argument("--schema", required=True, help="the functions' schema: madlib or learnedidx")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every failing statement")
    ap.add_argument("module", help="the MADlib module whose test files to run (svm, regress, ...)")
    args = ap.parse_args()
    files = sorted((Path(args.src) / "src/ports/postgres/modules" / args.module / "test").glob("*.sql_in"))
    if not files:
        print(f"no test files for module {args.module} under {args.src}", file=sys.stderr)
        return 2
    print(f"{'file':<24} {'statements':>10} {'passing':>8} {'tests':>6} {'passing':>8}")
    failed = 0
    with psycopg.connect(autocommit=True) as conn:
        for f in files:
            results = run_file(conn, f, args.schema, f"ic_{args.module}_{args.schema}")
            tests = [(s, e) for s, e in results if TESTED.search(s)]
            ok = sum(e is None for _, e in results)
            tests_ok = sum(e is None for _, e in tests)
            failed += len(results) - ok
            print(f"{f.name:<24} {len(results):>10} {ok:>8} {len(tests):>6} {tests_ok:>8}")
            if args.verbose:
                for k, (s, e) in enumerate(results):
                    if e is not None:
                        print(f"  #{k + 1}: {' '.join(s.split())[:100]}\n      {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
