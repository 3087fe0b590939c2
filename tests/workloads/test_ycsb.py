"""YCSB generators and runner against the reference client's behaviour."""
from __future__ import annotations

import numpy as np
import pytest

from learnedidx.errors import WorkloadError
from learnedidx.workloads import generators as gen
from learnedidx.workloads.peers import available_peers, get_adapter
from learnedidx.workloads.runner import execute
from learnedidx.workloads.spec import (INSERT, READ, SCAN, KeySpace, Workload, load_properties, load_stream,
                                       parse_properties, run_stream)


@pytest.mark.parametrize("n,name", [(0, b"user6284781860667377211"), (1, b"user8517097267634966620"),
                                    (2, b"user1820151046732198393"), (5, b"user1000385178204227360")])
def test_fnvhash64_key_names(n, name):
    assert gen.key_name(n) == name
    assert gen.key_names(np.array([n]))[0] == name


def test_zipfian_top_items_match_theory():
    z = gen.Zipfian(0, 999)
    draws = z.sample(np.random.default_rng(0).random(200_000))
    assert draws.min() >= 0 and draws.max() <= 999
    counts = np.bincount(draws, minlength=1000)
    p = 1.0 / np.arange(1, 1001) ** 0.99
    p /= p.sum()
    for i in range(2):  # items 0 and 1 are exact in YCSB's formula
        expect = p[i] * len(draws)
        assert abs(counts[i] - expect) < 6 * np.sqrt(expect)
    for i in range(2, 10):  # the rest follow YCSB's closed-form approximation (item 2 runs ~15% hot)
        assert abs(counts[i] / (p[i] * len(draws)) - 1) < 0.2


def test_scrambled_zipfian_spreads_hot_keys():
    s = gen.ScrambledZipfian(0, 9999)
    draws = s.sample(np.random.default_rng(1).random(100_000))
    assert draws.min() >= 0 and draws.max() < 10000
    top = np.argsort(np.bincount(draws, minlength=10000))[-10:]
    assert np.ptp(top) > 1000  # the hottest keys are not clustered at the start
    assert np.bincount(draws).max() > 20 * (len(draws) / 10000)  # still skewed


def test_latest_favours_recent_inserts():
    w = Workload.from_properties(load_properties("D"), {"recordcount": "10000", "operationcount": "20000"})
    s = run_stream(w, KeySpace(w), seed=3)
    reads = s.ops == READ
    nums = np.array([int(k[4:]) for k in s.keys])  # hashed names: compare via the unhashed generator
    last = w.recordcount + np.cumsum(s.ops == INSERT) - (s.ops == INSERT)
    u = np.random.default_rng(0).random(50_000)
    recent = gen.skewed_latest(u, np.full(50_000, 10_000, np.int64), 0.99)
    assert (recent >= 9_000).mean() > 0.5 and recent.max() <= 9_999
    assert reads.mean() == pytest.approx(0.95, abs=0.01)
    assert len(nums) == len(last)


def test_operation_mix_and_scan_lengths():
    w = Workload.from_properties(load_properties("E"), {"recordcount": "5000", "operationcount": "20000"})
    s = run_stream(w, KeySpace(w), seed=4)
    assert (s.ops == SCAN).mean() == pytest.approx(0.95, abs=0.01)
    sl = s.scan_lengths[s.ops == SCAN]
    assert sl.min() >= 1 and sl.max() <= 100 and abs(sl.mean() - 50.5) < 2


def test_properties_and_overrides(tmp_path):
    f = tmp_path / "mine.properties"
    f.write_text("# comment\nrecordcount=77\nreadproportion=0.5\nupdateproportion=0.5\nrequestdistribution=uniform\n")
    w = Workload.from_properties(load_properties(str(f)), {"operationcount": "9"})
    assert (w.recordcount, w.operationcount, w.requestdistribution) == (77, 9, "uniform")
    with pytest.raises(WorkloadError):
        Workload.from_properties(parse_properties("requestdistribution=weird"))
    with pytest.raises(WorkloadError):
        load_properties("no-such-workload")
    with pytest.raises(WorkloadError):
        Workload.from_properties({"recordcount": "many"})


@pytest.mark.parametrize("workload", ["A", "B", "C", "D", "E", "F", "D'", "E'"])
def test_every_peer_returns_identical_results(workload):
    w = Workload.from_properties(load_properties(workload), {"recordcount": "3000", "operationcount": "3000"})
    ks = KeySpace(w)
    load, run = load_stream(w, ks, 7), run_stream(w, ks, 7)
    peers, _ = available_peers()
    digests = {}
    for peer in peers:
        for mode in ("per-op", "batch"):
            opts = {"group_size": 256, "buffer_threshold": 16} if peer.startswith("learnedidx") else {}
            ad = get_adapter(peer, **opts)
            try:
                execute(ad, load, mode=mode, phase="load")
                ad.settle()
                rep = execute(ad, run, mode=mode)
            finally:
                ad.close()
            digests[(peer, mode)] = rep.digest
            assert rep.operations == 3000
            assert any(line.startswith("[OVERALL], Throughput(ops/sec), ") for line in rep.lines())
    assert len(set(digests.values())) == 1, digests
