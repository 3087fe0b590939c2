"""The sindex peers: SIndex run by our C++ driver program on the runner's streams.

Tests marked ``driver`` need the driver built (docs/workloads.md, "The sindex peer") and
named by ``$LEARNEDIDX_SINDEX_DRIVER``; they are skipped otherwise.  The others check how
the peer is found, skipped and reported, with small stand-in programs."""
from __future__ import annotations

import json
import os
import stat
import subprocess

import numpy as np
import pytest
from typer.testing import CliRunner

from learnedidx.cli import app
from learnedidx.errors import WorkloadError
from learnedidx.workloads import streamfile
from learnedidx.workloads.cli import run_peers, ycsb_streams
from learnedidx.workloads.peers import SINDEX_DRIVER_ENV, available_peers, get_adapter
from learnedidx.workloads.sindex import batches, run_driver, run_whole_streams, write_stream_file
from learnedidx.workloads.spec import DELETE, INSERT, READ, SCAN, UPDATE, OpStream

STORE = {"group_size": 256, "buffer_threshold": 16}  # small groups: merges happen during the runs
DRIVER = os.environ.get(SINDEX_DRIVER_ENV, "")
needs_driver = pytest.mark.skipif(
    not available_peers(["sindex"], whole_streams=True)[0],
    reason=f"the SIndex driver is not built ({SINDEX_DRIVER_ENV} unset or not a driver)")


def _program(tmp_path, name: str, body: str) -> str:
    f = tmp_path / name
    f.write_text("#!/bin/sh\n" + body + "\n")
    f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return str(f)


def test_not_built_is_skipped_with_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.delenv(SINDEX_DRIVER_ENV, raising=False)
    ok, skipped = available_peers(["sindex", "sindex-fixed"], whole_streams=True)
    assert ok == [] and set(skipped) == {"sindex", "sindex-fixed"}
    assert "docs/workloads.md" in skipped["sindex"] and SINDEX_DRIVER_ENV in skipped["sindex"]
    for path, why in ((str(tmp_path / "missing"), "not an executable file"),
                      (_program(tmp_path, "other", "echo something-else 1"), f"not a SIndex driver for stream format {streamfile.FORMAT}"),
                      (_program(tmp_path, "old", "echo learnedidx-sindex-driver 0"), "not a SIndex driver")):
        monkeypatch.setenv(SINDEX_DRIVER_ENV, path)
        assert why in available_peers(["sindex"], whole_streams=True)[1]["sindex"]
    res = CliRunner().invoke(app, ["bench", "compare", "--workloads", "C", "--peers", "sorteddict,sindex",
                                   "--records", "300", "--operations", "300", "--modes", "batch",
                                   "--out", str(tmp_path / "cmp"), "--sindex-driver", str(tmp_path / "missing")])
    assert res.exit_code == 0, res.output
    assert "skipping peer sindex" in res.output and "| sindex |" not in (tmp_path / "cmp" / "results.md").read_text()


def test_only_whole_stream_callers_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv(SINDEX_DRIVER_ENV, _program(tmp_path, "stub", f"echo learnedidx-sindex-driver {streamfile.FORMAT}"))
    assert available_peers(["sindex"], whole_streams=True)[0] == ["sindex"]
    ok, skipped = available_peers(["sindex", "sorteddict"])
    assert ok == ["sorteddict"] and "only learnedidx bench compare drives it" in skipped["sindex"]
    with pytest.raises(WorkloadError, match="runs whole operation streams"):
        get_adapter("sindex").get(b"k")
    res = CliRunner().invoke(app, ["ycsb", "run", "-w", "C", "--records", "200", "--operations", "200",
                                   "--peer", "sindex", "--peer", "sorteddict", "--mode", "batch"])
    assert res.exit_code == 0, res.output
    assert "skipping peer sindex: runs whole operation streams in its driver program" in res.output
    assert "# peer=sorteddict phase=run mode=batch" in res.output and "peer=sindex" not in res.output


def test_a_failing_driver_is_reported_and_its_run_skipped(monkeypatch, tmp_path):
    load, run = ycsb_streams("C", 50, 50, {}, None, 0)
    for body, why in (("echo 'sindex_driver: a key ends in a NUL byte' >&2; exit 2", "a key ends in a NUL byte"),
                      ("kill -SEGV $$", "killed by signal 11"),
                      ('echo \'{"variant": "exited-fix", "mode": "batch"}\'', "ran exited-fix/batch, not released/batch")):
        stub = _program(tmp_path, "stub", f'[ "$1" = --version ] && {{ echo learnedidx-sindex-driver {streamfile.FORMAT}; exit 0; }}\n{body}')
        monkeypatch.setenv(SINDEX_DRIVER_ENV, stub)
        warnings: list[str] = []
        assert run_whole_streams(load, run, ["sindex"], ["batch"], warn=warnings.append) == []
        assert len(warnings) == 1 and why in warnings[0], warnings


# ---------------------------------------------------------------- with the real driver


def _digests(reports) -> dict:
    return {(r.peer, r.mode): r.digest for r in reports if r.phase == "run"}


@needs_driver
@pytest.mark.parametrize("workload,overrides", [
    ("C", {}), ("A", {}), ("B", {}), ("D", {}), ("F", {}), ("D'", {}),
    # scans from stored keys only (no inserts): see the test below for scans from buffered keys
    ("E", {"insertproportion": "0", "requestdistribution": "uniform"}),
    ("A", {"readproportion": "0.5", "updateproportion": "0", "insertproportion": "0.5"}),
])
def test_sindex_returns_the_same_reads_as_learnedidx(workload, overrides):
    load, run = ycsb_streams(workload, 3000, 4000, overrides, None, 11)
    reports = run_peers(load, run, ["learnedidx"], ["per-op", "batch"], store_options=STORE, progress=False)
    reports += run_whole_streams(load, run, ["sindex", "sindex-fixed"], ["per-op", "batch"], warn=pytest.fail)
    digests = _digests(reports)
    assert len(digests) == 6 and len(set(digests.values())) == 1, digests
    for r in reports:
        ops = sum(h.get_total_count() for h in r.hist.values())
        assert r.operations == ops == (3000 if r.phase == "load" else 4000) and r.runtime_ms > 0


@needs_driver
def test_sindex_on_english_words_with_deletes(tmp_path):
    words = [w.encode() for w in ("zebra", "apple", "Äpfel", "naïve", "a", "ab", "abc", "b", "Llanfairpwllgwyngyll")]
    keys = words + [b"w%05d" % i for i in range(3000)]
    load = OpStream(np.full(2000, INSERT, np.int8), keys[:2000], np.zeros(2000, np.int32),
                    [b"v%d" % i * 20 for i in range(2000)])
    rng = np.random.default_rng(3)
    ops = rng.choice([READ, UPDATE, INSERT, DELETE, READ], 6000).astype(np.int8)
    run = OpStream(ops, [keys[i] for i in rng.integers(0, len(keys), 6000).tolist()], np.zeros(6000, np.int32),
                   [b"u%d" % i * 9 if o in (UPDATE, INSERT) else None for i, o in enumerate(ops.tolist())])
    reports = run_peers(load, run, ["learnedidx", "sorteddict"], ["per-op", "batch"], store_options=STORE, progress=False)
    reports += run_whole_streams(load, run, ["sindex-fixed"], ["per-op", "batch"], warn=pytest.fail)
    assert len(set(_digests(reports).values())) == 1, _digests(reports)


@needs_driver
def test_sindex_scans_from_buffered_keys_can_start_too_early():
    """SIndex's scan finds its start in the group's array with a binary search limited to the
    model's error window, which brackets stored keys only: a scan from a key that is still in
    the insert buffer can begin at array keys below it (docs/workloads.md).  The digest shows it."""
    load, run = ycsb_streams("E'", 3000, 3000, {}, None, 7)
    reports = run_peers(load, run, ["sorteddict"], ["batch"], progress=False)
    reports += run_whole_streams(load, run, ["sindex-fixed"], ["batch"], warn=pytest.fail)
    assert len(set(_digests(reports).values())) == 2


@needs_driver
@pytest.mark.parametrize("key,why", [(b"ends-in-nul\x00", "ends in a NUL byte"), (b"", "an empty key"),
                                     (b"x" * 257, "the longest key has 257 bytes; the largest key slot is 256")])
def test_the_driver_refuses_keys_it_cannot_store(key, why):
    load = OpStream(np.full(3, INSERT, np.int8), [b"a", b"b", key], np.zeros(3, np.int32), [b"1", b"2", b"3"])
    run = OpStream(np.array([READ], np.int8), [b"a"], np.zeros(1, np.int32), [None])
    warnings: list[str] = []
    assert run_whole_streams(load, run, ["sindex"], ["per-op"], warn=warnings.append) == []
    assert len(warnings) == 1 and why in warnings[0], warnings


@needs_driver
def test_the_driver_refuses_damaged_stream_files(tmp_path):
    load, run = ycsb_streams("F", 200, 300, {}, None, 1)
    f = tmp_path / "s.ops"
    write_stream_file(str(f), load, run)
    data = f.read_bytes()
    m = len(run.ops)  # the run's op codes come before its key lengths, keys, args and batches
    ops_at = len(data) - (8 + 4 * len(batches(run))) - 4 * m - sum(map(len, run.keys)) - 2 * m - m
    assert data[ops_at - 8:ops_at] == m.to_bytes(8, "little")
    id_at = ops_at - 8 - 4 * len(load.ops)  # the load's first value id
    for bad, why in ((b"NOTOPS!!" + data[8:], "bad magic"), (data[:-3], "truncated"), (data + b"\x00", "trailing"),
                     (data[:ops_at] + b"\x09" + data[ops_at + 1:], "unknown operation code 9"),
                     (data[:-4] + b"\x01\x00\x00\x00", "do not cover the run"),
                     (data[:id_at] + b"\xff" * 4 + data[id_at + 4:], "load value id is out of range")):
        f.write_bytes(bad)
        with pytest.raises(WorkloadError, match=why):
            run_driver(get_adapter("sindex"), str(f), "batch")


@needs_driver
def test_the_slot_fits_the_longest_key_and_the_load_is_one_bulk_build(tmp_path):
    for longest, slot in ((16, 16), (17, 24), (64, 64), (65, 128), (256, 256)):
        keys = [b"k%d" % i for i in range(2000)] + [b"z" * longest]
        load = OpStream(np.full(len(keys), INSERT, np.int8), keys, np.zeros(len(keys), np.int32), keys)
        run = OpStream(np.array([READ, SCAN], np.int8), [b"z" * longest, b"k1"], np.array([0, 3], np.int32), [None, None])
        f = tmp_path / "s.ops"
        write_stream_file(str(f), load, run)
        printed = subprocess.run([DRIVER, "--mode", "per-op", str(f)], capture_output=True, text=True, check=True)
        assert {json.loads(line)["slot"] for line in printed.stdout.splitlines()} == {slot}, longest
        rep_load, rep_run = run_driver(get_adapter("sindex"), str(f), "per-op")
        assert rep_load.operations == len(keys) and rep_load.hist["INSERT"].get_total_count() == len(keys)
        assert {n: h.get_total_count() for n, h in rep_run.hist.items()} == {"READ": 1, "SCAN": 1}
        ref = run_peers(load, run, ["sorteddict"], ["per-op"], progress=False)[1]
        assert rep_run.digest == ref.digest


@needs_driver
def test_bench_compare_with_sindex(tmp_path):
    out = tmp_path / "cmp"
    res = CliRunner().invoke(app, ["bench", "compare", "--workloads", "C,B", "--peers", "learnedidx,sindex,sindex-fixed",
                                   "--records", "2000", "--operations", "2000", "--repeat", "2", "--out", str(out),
                                   "--sindex-driver", DRIVER])
    assert res.exit_code == 0, res.output
    assert "disagree" not in res.output and "skipping" not in res.output
    table = (out / "results.md").read_text().splitlines()
    head = [c.strip() for c in table[2].strip("|").split("|")]
    assert head[2:5] == ["learnedidx", "sindex", "sindex-fixed"]
    assert all(float(c.replace(",", "")) > 0 for line in table[4:] for c in line.strip("|").split("|")[2:5])


def _driver_reports(path: str, *args: str) -> dict:
    out = subprocess.run([DRIVER, *args, path], capture_output=True, text=True, check=True,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}).stdout
    return {r["phase"]: r for r in map(json.loads, out.splitlines())}


@needs_driver
@pytest.mark.parametrize("mode", ["per-op", "batch"])
def test_sindex_is_timed_until_its_deferred_compaction_is_done(tmp_path, mode):
    """SIndex leaves inserts in its groups' buffers for a background round about a second
    away; the driver charges it the compaction that the run left (equal work with learnedidx,
    whose clock runs until its buffers are folded in), and the index is whole afterwards."""
    load, run = ycsb_streams("RI", 20000, 20000, {}, None, 5)
    f = tmp_path / "ri.ops"
    write_stream_file(str(f), load, run)
    r = _driver_reports(str(f), "--mode", mode, "--check")["run"]
    assert r["finish_ns"] == r["finish_background_cpu_ns"] + r["finish_sweep_ns"] and r["finish_ns"] < r["runtime_ns"]
    # about 10,000 inserts into 50 groups: every group's buffer is past the threshold of 8,
    # so compacting them is real work (a round over empty buffers takes microseconds)
    assert r["groups"] >= 50 and r["finish_background_cpu_ns"] + r["finish_sweep_ns"] > 1_000_000, r
    distinct = len(set(load.keys) | {k for k, o in zip(run.keys, run.ops.tolist()) if o == INSERT})
    assert r["checked_keys"] == distinct
    rep = run_driver(get_adapter("sindex"), str(f), mode)[1]
    assert 0 < rep.finish_ms < rep.runtime_ms


@needs_driver
def test_a_read_only_run_leaves_sindex_nothing_to_compact(tmp_path):
    load, run = ycsb_streams("C", 20000, 20000, {}, None, 5)
    f = tmp_path / "c.ops"
    write_stream_file(str(f), load, run)
    r = _driver_reports(str(f), "--mode", "batch", "--check")["run"]
    assert r["compacted_groups"] == 0 and r["checked_keys"] == len(set(load.keys))


def test_the_documented_build_finds_the_driver_source_with_the_installs_python(tmp_path):
    """docs/workloads.md, "Building the driver": the Python that finds sindex_driver.cc is the
    one learnedidx is installed in (the first `python` on PATH may lack it), whatever the
    current directory."""
    import re
    import sys
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "workloads.md").read_text()
    block = doc[doc.index("### Building the driver"):]
    lines = [line for line in block.splitlines() if re.match(r"(PY|SRC)=", line)][:2]
    assert [line[:3] for line in lines] == ["PY=", "SRC"]
    bindir = str(Path(sys.executable).parent)
    (tmp_path / "python").write_text("#!/bin/sh\nexit 3\n")  # a `python` without learnedidx, first on PATH
    (tmp_path / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{bindir}:{os.environ.get('PATH', '')}"}
    out = subprocess.run(["bash", "-ec", "\n".join(lines) + '\necho "$SRC"'], capture_output=True, text=True,
                         env=env, cwd=tmp_path, check=True).stdout.strip()
    assert out == str(streamfile_source()) and Path(out).is_file()


def streamfile_source():
    from importlib import resources

    return resources.files("learnedidx.workloads") / "sindex_driver.cc"


@needs_driver
def test_the_drivers_batch_latency_is_its_batchs_time(tmp_path):
    """As the runner's: in batch mode an operation's latency is its batch's time. One batch of
    reads: every read has that one latency, the run's whole time (not a 2,000th of it)."""
    keys = [b"k%05d" % i for i in range(2000)]
    load = OpStream(np.full(len(keys), INSERT, np.int8), keys, np.zeros(len(keys), np.int32), keys)
    run = OpStream(np.full(len(keys), READ, np.int8), keys, np.zeros(len(keys), np.int32), [None] * len(keys))
    f = tmp_path / "b.ops"
    write_stream_file(str(f), load, run)
    rep_load, rep_run = run_driver(get_adapter("sindex"), str(f), "batch")
    for rep in (rep_load, rep_run):
        (h,) = rep.hist.values()
        assert h.get_total_count() == len(keys) and h.get_min_value() == h.get_max_value()
        assert h.get_max_value() >= 0.5 * (rep.runtime_ms - rep.finish_ms) * 1000 > 1
