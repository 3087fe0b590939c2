"""YCSB generators and workloads against the reference client's (site.ycsb) behaviour."""
from __future__ import annotations

import math

import numpy as np
import pytest

from learnedidx.errors import WorkloadError
from learnedidx.workloads import generators as gen
from learnedidx.workloads.spec import (INSERT, OP_NAMES, SCAN, KeySpace, Workload, load_properties,
                                       parse_properties, run_stream)


def workload(name: str, **props) -> Workload:
    return Workload.from_properties(load_properties(name), {k: str(v) for k, v in props.items()})


@pytest.mark.parametrize("n,name", [(0, b"user6284781860667377211"), (1, b"user8517097267634966620"),
                                    (2, b"user1820151046732198393"), (5, b"user1000385178204227360")])
def test_fnvhash64_key_names(n, name):
    assert gen.key_name(n) == name
    assert gen.key_names(np.array([n]))[0] == name


def test_ordered_key_names_and_zeropadding():
    assert gen.key_name(5, hashed=False) == b"user5"
    assert gen.key_name(5, hashed=False, zeropadding=8) == b"user00000005"
    w = workload("C", recordcount=20, operationcount=50, insertorder="ordered", zeropadding=3)
    assert all(k[:4] == b"user" and len(k) == 7 for k in run_stream(w, KeySpace(w)).keys)


class JavaZipfian:
    """A line-by-line transliteration of YCSB's ZipfianGenerator, the reference for the kernels."""

    def __init__(self, lo: int, hi: int, zetan: float | None = None, theta: float = 0.99) -> None:
        self.items, self.base, self.theta = hi - lo + 1, lo, theta
        self.zeta2theta = sum(1 / (i + 1) ** theta for i in range(2))
        self.alpha = 1.0 / (1.0 - theta)
        self.zetan = sum(1 / (i + 1) ** theta for i in range(self.items)) if zetan is None else zetan
        self.countforzeta = self.items
        self.eta = (1 - math.pow(2.0 / self.items, 1 - theta)) / (1 - self.zeta2theta / self.zetan)

    def next_long(self, itemcount: int, u: float) -> int:
        if itemcount > self.countforzeta:
            for i in range(self.countforzeta, itemcount):  # zetastatic(st, n, theta, initialsum)
                self.zetan += 1 / (i + 1) ** self.theta
            self.countforzeta = itemcount
            self.eta = (1 - math.pow(2.0 / self.items, 1 - self.theta)) / (1 - self.zeta2theta / self.zetan)
        uz = u * self.zetan
        if uz < 1.0:
            return self.base
        if uz < 1.0 + math.pow(0.5, self.theta):
            return self.base + 1
        return self.base + int(itemcount * math.pow(self.eta * u - self.eta + 1, self.alpha))


def test_zipfian_matches_reference_draw_for_draw():
    u = np.random.default_rng(0).random(5000)
    ref = JavaZipfian(3, 999)
    assert gen.Zipfian(3, 999).sample(u).tolist() == [ref.next_long(ref.items, x) for x in u]


def test_zipfian_top_items_match_theory():
    draws = gen.Zipfian(0, 999).sample(np.random.default_rng(0).random(200_000))
    assert draws.min() >= 0 and draws.max() <= 999
    counts = np.bincount(draws, minlength=1000)
    p = 1.0 / np.arange(1, 1001) ** 0.99
    p /= p.sum()
    for i in range(2):  # items 0 and 1 are exact in Gray et al.'s method
        expect = p[i] * len(draws)
        assert abs(counts[i] - expect) < 6 * np.sqrt(expect)
    for i in range(2, 10):  # the rest follow the closed-form approximation (item 2 runs ~15% hot)
        assert abs(counts[i] / (p[i] * len(draws)) - 1) < 0.2


def test_scrambled_zipfian_is_ycsbs_inclusive_10_to_the_10_items():
    s = gen.ScrambledZipfian(0, 9999)
    assert s.count == 10_000 and s.zipf.items == 10_000_000_001 and s.zipf.zetan == 26.46902820178302
    u = np.random.default_rng(2).random(2000)
    ref = JavaZipfian(0, gen.SCRAMBLED_ITEM_COUNT, gen.SCRAMBLED_ZETAN)
    assert s.sample(u).tolist() == [gen.fnvhash64(ref.next_long(ref.items, x)) % 10_000 for x in u]


def test_scrambled_zipfian_spreads_hot_keys():
    draws = gen.ScrambledZipfian(0, 9999).sample(np.random.default_rng(1).random(100_000))
    assert draws.min() >= 0 and draws.max() < 10000
    top = np.argsort(np.bincount(draws, minlength=10000))[-10:]
    assert np.ptp(top) > 1000  # the hottest keys are not clustered at the start
    assert np.bincount(draws).max() > 20 * (len(draws) / 10000)  # still skewed


def test_skewed_latest_matches_reference_as_inserts_grow():
    rng = np.random.default_rng(5)
    last = 500 + np.cumsum(rng.random(4000) < 0.3)  # keys that exist before each draw
    u = rng.random(4000)
    ref = JavaZipfian(0, int(last[0]) - 2)  # SkewedLatestGenerator: ZipfianGenerator(lastValue())
    expect = [int(n) - 1 - ref.next_long(int(n) - 1, x) for n, x in zip(last, u)]
    got = gen.skewed_latest(u, last.astype(np.int64), 0.99)
    assert got.tolist() == expect
    assert got.min() >= 1 and (got < last).all()  # YCSB's quirk: key 0 is never drawn


def test_latest_favours_recent_inserts():
    recent = gen.skewed_latest(np.random.default_rng(0).random(50_000), np.full(50_000, 10_000, np.int64), 0.99)
    assert (recent >= 9_000).mean() > 0.5 and recent.max() == 9_999
    w = workload("D", recordcount=2000, operationcount=20000, insertorder="ordered")
    s = run_stream(w, KeySpace(w), seed=3)
    nums = np.array([int(k[4:]) for k in s.keys])
    inserts = s.ops == INSERT
    last = w.recordcount + np.cumsum(inserts) - inserts
    assert (nums[inserts] == last[inserts]).all()  # the acknowledged counter: recordcount + i
    reads = ~inserts
    assert (nums[reads] < last[reads]).all() and np.median(last[reads] - nums[reads]) < 50


def test_zipfian_requests_redraw_keys_not_inserted_yet():
    w = workload("E", recordcount=100, operationcount=20000, insertorder="ordered")
    s = run_stream(w, KeySpace(w), seed=1)
    nums = np.array([int(k[4:]) for k in s.keys])
    inserts = s.ops == INSERT
    last = w.recordcount + np.cumsum(inserts) - inserts
    assert (nums[~inserts] < last[~inserts]).all()
    assert (nums[~inserts] >= 100).any()  # keys inserted during the run are requested too


def test_exponential_counts_back_from_the_last_insert():
    w = workload("D", recordcount=10_000, operationcount=20_000, requestdistribution="exponential",
                 insertorder="ordered", **{"exponential.percentile": 95, "exponential.frac": 0.1})
    s = run_stream(w, KeySpace(w), seed=2)
    nums = np.array([int(k[4:]) for k in s.keys])
    inserts = s.ops == INSERT
    last = w.recordcount + np.cumsum(inserts) - inserts
    back = (last - 1 - nums)[~inserts]
    assert back.min() >= 0 and nums.min() >= 0
    assert (back < 1000).mean() == pytest.approx(0.95, abs=0.01)  # 95% within frac * recordcount


def test_hotspot_and_uniform_stay_in_the_loaded_records():
    for dist in ("hotspot", "uniform"):
        w = workload("B", recordcount=1000, operationcount=20000, requestdistribution=dist, insertorder="ordered")
        nums = np.array([int(k[4:]) for k in run_stream(w, KeySpace(w), seed=4).keys])
        assert nums.min() >= 0 and nums.max() < 1000
    assert (nums < 200).mean() < 0.3  # uniform: the hot set gets its share only
    w = workload("B", recordcount=1000, operationcount=20000, requestdistribution="hotspot", insertorder="ordered")
    nums = np.array([int(k[4:]) for k in run_stream(w, KeySpace(w), seed=4).keys])
    assert (nums < 200).mean() == pytest.approx(0.8, abs=0.02)


@pytest.mark.parametrize("name,mix", [("A", {"READ": .5, "UPDATE": .5}), ("B", {"READ": .95, "UPDATE": .05}),
                                      ("C", {"READ": 1.0}), ("D", {"READ": .95, "INSERT": .05}),
                                      ("E", {"SCAN": .95, "INSERT": .05}),
                                      ("F", {"READ": .5, "READ-MODIFY-WRITE": .5}),
                                      ("D'", {"READ": .9, "INSERT": .1}), ("E'", {"SCAN": .9, "INSERT": .1})])
def test_operation_mix_within_bounds(name, mix):
    n = 20_000
    s = run_stream(workload(name, recordcount=1000, operationcount=n), KeySpace(workload(name)), seed=6)
    for op, name_ in enumerate(OP_NAMES):
        p = mix.get(name_, 0.0)
        assert abs((s.ops == op).sum() - p * n) <= 5 * math.sqrt(n * p * (1 - p)) + 1e-9, name_


def test_scan_lengths():
    s = run_stream(w := workload("E", recordcount=5000, operationcount=20000), KeySpace(w), seed=4)
    sl = s.scan_lengths[s.ops == SCAN]
    assert sl.min() == 1 and sl.max() == 100 and abs(sl.mean() - 50.5) < 2
    s = run_stream(w := workload("E'", recordcount=5000, operationcount=2000), KeySpace(w), seed=4)
    assert set(s.scan_lengths[s.ops == SCAN].tolist()) == {10}
    s = run_stream(w := workload("E", recordcount=500, operationcount=20000, minscanlength=5,
                                 scanlengthdistribution="zipfian"), KeySpace(w), seed=4)
    sl = s.scan_lengths[s.ops == SCAN]
    assert sl.min() == 5 and sl.max() <= 100 and (sl == 5).mean() > 0.15  # short scans favoured


def test_properties_and_overrides(tmp_path):
    f = tmp_path / "mine.properties"
    f.write_text("# comment\n! also\nrecordcount=77\nreadproportion : 0.5\nupdateproportion=0.5\n"
                 "requestdistribution=uniform\nworkload=site.ycsb.workloads.CoreWorkload\n")
    w = Workload.from_properties(load_properties(str(f)), {"operationcount": "9", "recordcount": "78"})
    assert (w.recordcount, w.operationcount, w.readproportion, w.requestdistribution) == (78, 9, 0.5, "uniform")
    for bad in ({"requestdistribution": "weird"}, {"recordcount": "many"}, {"scanlengthdistribution": "normal"},
                {"minscanlength": "5", "maxscanlength": "4"}, {"readproportion": "0", "updateproportion": "0"}):
        with pytest.raises(WorkloadError):
            Workload.from_properties(bad)
    with pytest.raises(WorkloadError):
        load_properties("no-such-workload")
    with pytest.raises(WorkloadError):
        parse_properties("no separator here")


def test_builtin_files_match_ycsb():
    for name, read, dist in (("A", .5, "zipfian"), ("B", .95, "zipfian"), ("C", 1.0, "zipfian"),
                             ("D", .95, "latest"), ("F", .5, "zipfian")):
        w = workload(name)
        assert (w.readproportion, w.requestdistribution, w.fieldcount, w.fieldlength) == (read, dist, 10, 100)
    e = workload("E")
    assert (e.scanproportion, e.insertproportion, e.maxscanlength, e.scanlengthdistribution) == (.95, .05, 100, "uniform")
    assert workload("F").readmodifywriteproportion == 0.5
    assert workload("dp").requestdistribution == "recent10"
