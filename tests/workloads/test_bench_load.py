"""``learnedidx bench load``: every peer's build answers lookups; the command prints the table."""
from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from learnedidx.bench import load
from learnedidx.cli import app
from learnedidx.workloads.peers import SINDEX_DRIVER_ENV


@pytest.mark.parametrize("peer", sorted(load.BUILDS))
def test_each_build_answers_lookups_with_the_last_value(peer):
    keys = [b"k%03d" % (i % 700) for i in range(1000)]  # repeats: the last value wins
    values = [b"%d" % i for i in range(1000)]
    get = load.BUILDS[peer](keys, values)
    last = dict(zip(keys, values))
    assert [get(k) for k in last] == list(last.values())
    assert get(b"k7000") is None and get(b"\x00") is None


def test_key_sets():
    assert load.make_keys("ycsb:3") == [b"user6284781860667377211", b"user8517097267634966620",
                                        b"user1820151046732198393"]
    assert len(load.make_keys("ycsb:0")) == 0


def test_bench_load_prints_every_peer_and_the_ratios():
    res = CliRunner().invoke(app, ["bench", "load", "--keys", "ycsb:3000", "--repeat", "1"])
    assert res.exit_code == 0, res.output
    for peer in ("learnedidx", "sorteddict", "sortedlist", "learnedidx / sorteddict", "learnedidx / sortedlist"):
        assert peer in res.output
    assert "3,000" in res.output
    # SIndex beside them where its driver is built, else a message saying how to build it
    assert ("learnedidx / sindex" in res.output) != ("skipping peer sindex" in res.output)


@pytest.mark.skipif(not os.environ.get(SINDEX_DRIVER_ENV), reason="the SIndex driver is not built")
def test_sindex_loads_the_same_pairs():
    keys = [b"k%05d" % (i % 3000) for i in range(4000)]
    r = load._sindex(keys, [b"%08d" % i for i in range(4000)])
    assert r["seconds"] > 0  # the driver loaded them (it fails loudly otherwise)


def test_bench_load_refuses_an_unknown_peer():
    res = CliRunner().invoke(app, ["bench", "load", "--quick", "--peers", "learnedidx,nonesuch"])
    assert res.exit_code != 0 and "nonesuch" in res.output


def test_key_sets_are_those_of_ycsb_run():
    from learnedidx.errors import WorkloadError
    from learnedidx.workloads.cli import ycsb_streams
    from learnedidx.workloads.keysources import load_keys

    loaded, _ = ycsb_streams("C", 5000, 0, {}, None, 0)
    assert load.make_keys("ycsb:5000") == list(loaded.keys)
    try:
        n = len(load_keys("words"))
    except WorkloadError:
        pytest.skip("no word list")
    loaded, _ = ycsb_streams("C", n, 0, {}, "words", 0)
    assert load.make_keys("words") == list(loaded.keys)
