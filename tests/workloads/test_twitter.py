"""Twitter cache-trace reader, generator and replay on files in the real format."""
from __future__ import annotations

from pathlib import Path

import pytest

from learnedidx.errors import TraceFormatError
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
