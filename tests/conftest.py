"""Suite-wide settings.  Per-area fixtures live in each tests/<area>/conftest.py."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.pgfixtures"]  # postgresql_proc, postgresql

# No example database: the suite may run from a read-only checkout (scripts/test.sh runs it
# as an unprivileged user when invoked as root).
settings.register_profile(
    "default", database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", database=None, deadline=None, max_examples=500,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run only when asked for (``-m slow``): CI runs their smaller
    versions."""
    import pytest

    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
