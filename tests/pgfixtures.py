"""PostgreSQL fixtures (pytest-postgresql), a plugin of the whole suite (see tests/conftest.py).

``postgresql_proc`` is a real, throwaway PostgreSQL 15 cluster started from the server
binaries in ``LEARNEDIDX_PG_BINDIR`` (default: the system's), running as the user running
pytest; ``postgresql`` is a connection to a fresh database in it.  PostgreSQL refuses to run
as root, so under root the tests that need a cluster are skipped (scripts/test.sh drops root
privileges first) and the others still run.
"""
from __future__ import annotations

import os

import pytest
from pytest_postgresql import factories

PG_BINDIR = os.environ.get("LEARNEDIDX_PG_BINDIR", "/usr/lib/postgresql/15/bin")

_postgresql_server = factories.postgresql_proc(
    executable=os.path.join(PG_BINDIR, "pg_ctl"),
    port=None,  # a free port
    postgres_options="-c max_connections=60 -c shared_buffers=128MB -c fsync=off",
)


@pytest.fixture(scope="session")
def postgresql_proc(request):
    """The session's cluster (skips the test under root)."""
    if os.geteuid() == 0:
        pytest.skip("PostgreSQL cannot run as root; run the suite as an unprivileged user (scripts/test.sh does)")
    return request.getfixturevalue("_postgresql_server")


postgresql = factories.postgresql("postgresql_proc")
