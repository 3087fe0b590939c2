"""PostgreSQL fixtures (pytest-postgresql) shared by the in-database test packages.

Use from a conftest with ``pytest_plugins = ["tests.pgfixtures"]`` or import the names.
The cluster is a real, throwaway PostgreSQL 15 started from the installed server binaries;
it runs as the user running pytest (scripts/test.sh drops root privileges first).
"""
from __future__ import annotations

import os
import shutil

import pytest
from pytest_postgresql import factories

PG_BINDIR = os.environ.get("LEARNEDIDX_PG_BINDIR", "/usr/lib/postgresql/15/bin")
PG_CTL = os.path.join(PG_BINDIR, "pg_ctl")

if os.geteuid() == 0:  # pragma: no cover - the guard CI never hits
    pytest.skip("PostgreSQL tests cannot run as root; use scripts/test.sh", allow_module_level=True)

postgresql_proc = factories.postgresql_proc(
    executable=PG_CTL,
    port=None,  # a free port
    postgres_options="-c max_connections=60 -c shared_buffers=128MB -c fsync=off",
)
postgresql = factories.postgresql("postgresql_proc")


def pg_available() -> bool:
    return os.path.exists(PG_CTL)
