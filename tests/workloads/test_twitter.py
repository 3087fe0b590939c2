"""Twitter cache-trace reader, generator and replay on files in the real format."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from learnedidx.cli import app
from learnedidx.errors import TraceFormatError
from learnedidx.workloads.cli import run_peers
from learnedidx.workloads.peers import available_peers, get_adapter
from learnedidx.workloads.runner import execute
from learnedidx.workloads.spec import OP_NAMES
from learnedidx.workloads.twitter import (OPERATIONS, PRESETS, cluster_stats, generate, parse_stats_table,
                                          read_trace, replay_streams)

STATS = Path(__file__).resolve().parents[3] / "shared" / "data" / "twitter" / "stat_2020Mar.md"


def test_reads_real_format_with_commas_in_keys(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("0,Nz_ztinzCiiCmiKCzizKQi,22,30,1,add,7200\n"
                 "1,a,b,,c,5,0,3,get,0\n")
    reqs = list(read_trace(f))
    assert reqs[0].key == b"Nz_ztinzCiiCmiKCzizKQi" and reqs[0].kind == "write" and reqs[0].ttl == 7200
    assert reqs[1].key == b"a,b,,c" and reqs[1].key_size == 5 and reqs[1].kind == "read"


def test_every_operation_name_maps(tmp_path):
    f = tmp_path / "ops.csv"
    f.write_text("".join(f"{i},k{i},2,1,1,{op},0\n" for i, op in enumerate(OPERATIONS)))
    kinds = {r.op: r.kind for r in read_trace(f)}
    assert kinds == OPERATIONS
    assert {kinds["get"], kinds["gets"]} == {"read"} and kinds["delete"] == "delete"
    assert all(kinds[o] == "write" for o in ("set", "add", "replace", "cas", "append", "prepend", "incr", "decr"))


def test_malformed_lines_reported_with_line_number(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("0,k,1,1,1,get,0\n1,k,1,1,1,explode,0\nnot a trace line\n3,k,1,1,1,set,0\n")
    with pytest.raises(TraceFormatError) as e:
        list(read_trace(f))
    assert e.value.lineno == 2
    assert [r.timestamp for r in read_trace(f, on_error="skip")] == [0, 3]


@pytest.mark.parametrize("suffix", [".csv", ".zst"])
def test_generate_then_read_round_trip(tmp_path, suffix):
    out = tmp_path / f"c12{suffix}"
    n_keys = generate(PRESETS["12"], 5000, out, seed=1)
    reqs = list(read_trace(out))
    assert len(reqs) == 5000 and len({r.key for r in reqs}) == n_keys
    assert all(len(r.key) == 44 and r.value_size == 1030 for r in reqs)
    writes = sum(r.kind == "write" for r in reqs) / len(reqs)
    assert writes == pytest.approx(0.8, abs=0.03)
    assert any(b"," in r.key for r in reqs)
    load, run = replay_streams(out, 1000)
    assert len(load.keys) == len({r.key for r in reqs[:1000]}) and len(run.keys) == 4000


@pytest.mark.skipif(not STATS.exists(), reason="shared/data not beside the checkout")
def test_stats_table_parses_sia_clusters():
    table = parse_stats_table(STATS)
    for c in ("12", "15", "31", "37"):
        assert table[c].key_size == PRESETS[c].key_size and table[c].ops == PRESETS[c].ops
    assert cluster_stats("cluster12", STATS).zipf_alpha == pytest.approx(0.3048)


def test_skipped_lines_are_reported_with_their_numbers(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("0,k,1,1,1,get,0\n\n1,k,x,1,1,get,0\n2,k,1,1,1,get\n3,,1,1,1,get,0\n4,k,1,1,1,set,0\n")
    seen = []
    reqs = list(read_trace(f, on_error="skip", on_skip=lambda n, why: seen.append((n, why))))
    assert [r.timestamp for r in reqs] == [0, 4] and [n for n, _ in seen] == [3, 4, 5]
    assert "empty key" in seen[2][1]
    res = CliRunner().invoke(app, ["trace", "replay", str(f), "--load-requests", "1", "--peer", "sorteddict",
                                   "--mode", "per-op"])
    assert res.exit_code == 0 and "skipped malformed line 3" in res.output and "skipped malformed line 5" in res.output
    res = CliRunner().invoke(app, ["trace", "replay", str(f), "--strict", "--peer", "sorteddict"])
    assert res.exit_code != 0 and isinstance(res.exception, TraceFormatError) and res.exception.lineno == 3


def test_deletes_are_replayed(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("0,a,1,3,1,set,0\n0,b,1,3,1,set,0\n1,a,1,0,1,delete,0\n2,a,1,0,1,get,0\n3,b,1,0,1,gets,0\n"
                 "4,a,1,2,1,add,0\n5,a,1,0,1,get,0\n")
    load, run = replay_streams(f, 2)
    assert load.keys == [b"a", b"b"] and [OP_NAMES[o] for o in run.ops] == [
        "DELETE", "READ", "READ", "INSERT", "READ"]
    ad = get_adapter("sorteddict")
    execute(ad, load)
    got = []
    ad.get = lambda k, g=ad.get: got.append(g(k)) or got[-1]
    execute(ad, run)
    assert got == [None, load.values[1], run.values[3]]


def test_reader_streams_in_constant_memory(tmp_path):
    f = tmp_path / "big.csv.zst"
    line = b"0,VRhTbRp_pBA9DsRrkCqxP_1ATgU5U0y5joNEBtznZlQQ,44,1030,1,set,300\n"
    import zstandard

    f.write_bytes(zstandard.ZstdCompressor().compress(line * 100_000))  # 6.5 MB of lines
    tracemalloc.start()
    n = sum(1 for _ in read_trace(f))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == 100_000 and peak < 2 << 20


def test_replay_gives_identical_results_on_every_installed_peer(tmp_path):
    out = tmp_path / "c37.csv"
    generate(PRESETS["37"], 4000, out, seed=2)
    with open(out, "a") as fh:  # deletes of loaded keys, then reads of them
        keys = [r.key.decode() for r in read_trace(out)][:50]
        fh.writelines(f"9,{k},{len(k)},0,1,delete,0\n9,{k},{len(k)},0,1,get,0\n" for k in keys)
    load, run = replay_streams(out, 1000)
    reports = run_peers(load, run, available_peers()[0], ["per-op", "batch"], progress=False)
    assert len({r.digest for r in reports if r.phase == "run"}) == 1
