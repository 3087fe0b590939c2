"""The stream files that programs outside Python (the SIndex driver) execute: what is read
back is what the runner would execute."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from learnedidx.errors import WorkloadError
from learnedidx.workloads import streamfile
from learnedidx.workloads.cli import ycsb_streams
from learnedidx.workloads.runner import fingerprint, _plan
from learnedidx.workloads.sindex import batches, write_stream_file
from learnedidx.workloads.spec import DELETE, INSERT, READ, RMW, SCAN, UPDATE, OpStream

WRITES = (UPDATE, INSERT, RMW)


def _check_round_trip(path, load: OpStream, run: OpStream) -> streamfile.StreamFile:
    write_stream_file(str(path), load, run)
    got = streamfile.read(path)
    assert got.load_keys == list(load.keys)
    assert [got.values[i] for i in got.load_values.tolist()] == [fingerprint(v) for v in load.values]
    assert got.ops.tolist() == run.ops.tolist() and got.run_keys == list(run.keys)
    for i, o in enumerate(run.ops.tolist()):
        if o in WRITES:
            assert got.values[got.args[i]] == fingerprint(run.values[i])
        else:
            assert got.args[i] == (run.scan_lengths[i] if o == SCAN else 0)
    assert len(set(got.values)) == len(got.values)  # each digest view once
    # The runner's own batches (batch mode), as it would call the peer.
    assert got.batches.tolist() == [sum(counts.values()) for _, _, counts in _plan(run)]
    return got


@pytest.mark.parametrize("workload", ["A", "E'", "F", "D"])
def test_ycsb_streams_round_trip(tmp_path, workload):
    load, run = ycsb_streams(workload, 2000, 3000, {"maxscanlength": "30"}, None, 5)
    got = _check_round_trip(tmp_path / "s.ops", load, run)
    # YCSB values are ~1 KB windows of a random pool: stored as length + both ends.
    assert {len(v) for v in got.values} == {8 + 64 + 64}


_ops = st.lists(st.tuples(st.sampled_from([READ, UPDATE, INSERT, SCAN, RMW, DELETE]),
                          st.binary(max_size=300), st.binary(max_size=400), st.integers(1, 5000)), max_size=60)


@given(load=st.lists(st.tuples(st.binary(max_size=300), st.binary(max_size=400)), max_size=40), ops=_ops)
def test_any_stream_round_trips(tmp_path_factory, load, ops):
    path = tmp_path_factory.mktemp("rt") / "s.ops"
    ls = OpStream(np.full(len(load), INSERT, np.int8), [k for k, _ in load], np.zeros(len(load), np.int32),
                  [v for _, v in load])
    codes = np.array([o for o, *_ in ops], np.int8)
    rs = OpStream(codes, [k for _, k, _, _ in ops], np.array([n if o == SCAN else 0 for o, _, _, n in ops], np.int32),
                  [v if o in WRITES else None for o, _, v, _ in ops])
    _check_round_trip(path, ls, rs)


def test_deletes_and_a_twitter_like_mix_round_trip(tmp_path):
    keys = [b"k%04d" % i for i in range(500)]
    load = OpStream(np.full(400, INSERT, np.int8), keys[:400], np.zeros(400, np.int32), [b"v" * 30] * 400)
    ops = np.array([READ, DELETE, DELETE, INSERT, READ, SCAN, SCAN, DELETE] * 700, np.int8)
    run = OpStream(ops, [keys[i % 500] for i in range(len(ops))],
                   np.where(ops == SCAN, 7, 0).astype(np.int32),
                   [b"w" * (i % 200) if o == INSERT else None for i, o in enumerate(ops.tolist())])
    got = _check_round_trip(tmp_path / "s.ops", load, run)
    assert max(got.batches) <= 4096 and len(got.batches) == len(batches(run))


def test_a_key_longer_than_the_format_allows_is_refused(tmp_path):
    load = OpStream(np.full(1, INSERT, np.int8), [b"x" * 70_000], np.zeros(1, np.int32), [b"v"])
    run = OpStream(np.zeros(0, np.int8), [], np.zeros(0, np.int32), [])
    with pytest.raises(WorkloadError, match="a key of 70,000 bytes"):
        write_stream_file(str(tmp_path / "s.ops"), load, run)


def test_damaged_files_are_refused(tmp_path):
    load, run = ycsb_streams("A", 100, 100, {}, None, 1)
    f = tmp_path / "s.ops"
    write_stream_file(str(f), load, run)
    data = f.read_bytes()
    for bad, why in ((b"NOTOPS!!" + data[8:], "not a stream file"), (data[:-3], "truncated"),
                     (data + b"\x00", "trailing bytes")):
        f.write_bytes(bad)
        with pytest.raises(WorkloadError, match=why):
            streamfile.read(f)


def test_batches_must_cover_the_run(tmp_path):
    load, run = ycsb_streams("C", 10, 10, {}, None, 1)
    for bad in ([5, 4], [10, 0], [11]):
        with pytest.raises(ValueError, match="batches"):
            streamfile.write(tmp_path / "s.ops", load, run, bad, fingerprint)
    with pytest.raises(WorkloadError, match="inserts only"):
        streamfile.write(tmp_path / "s.ops", run, run, [10], fingerprint)
