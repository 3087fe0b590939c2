"""The crash campaign (learnedidx/workloads/crash.py): a writing child process SIGKILLed at
random moments, also while it opens the store; every reopened state checked against an
oracle.  CI runs a few dozen rounds; ``-m slow`` runs 300 (``learnedidx store crash-test``
runs any number)."""
from __future__ import annotations

import pytest

from learnedidx.workloads.crash import Op, apply, operations, run


def _check(report) -> None:
    assert report.failures == []
    assert (report.lost, report.wrong, report.half_applied) == (0, 0, 0)
    assert report.checks >= report.rounds // 3 and report.acknowledged > 100 * report.rounds // 3
    assert report.killed_in_open > 0 and report.killed_in_ops > 0


def test_crash_campaign(tmp_path):
    _check(run(tmp_path / "db", rounds=30, seed=1))


@pytest.mark.slow
def test_crash_campaign_300_rounds(tmp_path):
    _check(run(tmp_path / "db", rounds=300, seed=2))


def test_the_oracle_applies_batches_in_order_and_answers_reads():
    state = {b"a": b"1"}
    assert apply(state, Op("apply_many", (b"a", b"a", b"a", b"b"), (None, b"2", None, None))) == [b"1", None, b"2",
                                                                                                None]
    assert apply(state, Op("delete", (b"a",), (None,))) is True and apply(state, Op("delete", (b"a",), (None,))) is False
    assert apply(state, Op("put_many", (b"c", b"c"), (b"x", b"y"))) is None and state == {b"c": b"y"}
    first = [next(operations(5, 3)) for _ in range(1)]
    assert first == [next(operations(5, 3))]  # the parent and the child see the same operations
