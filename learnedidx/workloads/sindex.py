"""The SIndex peers (``sindex``, ``sindex-fixed``): SIndex runs in our C++ driver program
(``sindex_driver.cc``, built as docs/workloads.md says), a whole stream file at a time.

The driver executes the operations and batches the runner would, times itself the way the
runner times the in-process peers (the digest's own time left out) and prints one JSON
report per phase, turned here into the runner's :class:`Report`.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Callable, Sequence

from learnedidx.errors import WorkloadError
from learnedidx.workloads import streamfile
from learnedidx.workloads.peers import PEERS, SIndexAdapter, get_adapter
from learnedidx.workloads.runner import Report, fingerprint, latency_histogram, segment_end
from learnedidx.workloads.spec import OpStream

#: what the variants print as ``variant`` (a check that the flag reached the driver)
VARIANTS = {False: "released", True: "exited-fix"}


def batches(run: OpStream) -> list[int]:
    """The sizes of the runner's batches of ``run`` (batch mode), in order."""
    ops, sls = run.ops.tolist(), run.scan_lengths.tolist()
    out, i = [], 0
    while i < len(ops):
        j = segment_end(ops, sls, i)
        out.append(j - i)
        i = j
    return out


def write_stream_file(path: str, load: OpStream, run: OpStream) -> None:
    """``load`` and ``run`` as the driver reads them (see :mod:`learnedidx.workloads.streamfile`)."""
    streamfile.write(path, load, run, batches(run), fingerprint)


def run_driver(adapter: SIndexAdapter, path: str, mode: str) -> list[Report]:
    """The load and run reports of one driver run on the stream file ``path``."""
    cmd = [adapter.driver, "--mode", mode] + (["--fix-exited"] if adapter.fix_exited else []) + [path]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}  # SIndex trains its models with LAPACK
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        why = proc.stderr.strip().splitlines()[-1:] or [f"killed by signal {-proc.returncode}" if proc.returncode < 0
                                                      else f"exit status {proc.returncode}"]
        raise WorkloadError(f"peer {adapter.name} ({mode}): the SIndex driver failed: {why[0]}")
    reports = []
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        if r["variant"] != VARIANTS[adapter.fix_exited] or r["mode"] != mode:
            raise WorkloadError(f"the SIndex driver ran {r['variant']}/{r['mode']}, not {VARIANTS[adapter.fix_exited]}/{mode}")
        rep = Report(adapter.name, r["phase"], mode, runtime_ms=r["runtime_ns"] / 1e6, operations=r["operations"],
                     digest=r["digest"], finish_ms=r.get("finish_ns", 0) / 1e6)
        for name, pairs in sorted(r["latency_us"].items()):
            h = rep.hist[name] = latency_histogram()
            for us, count in pairs:
                h.record_value(us, count)
        reports.append(rep)
    if [r.phase for r in reports] != ["load", "run"]:
        raise WorkloadError(f"peer {adapter.name}: the SIndex driver printed {len(reports)} reports, not load and run")
    return reports


def run_whole_streams(load: OpStream, run: OpStream, peers: Sequence[str], modes: Sequence[str],
                      warn: Callable[[str], None] = print) -> list[Report]:
    """Load then run the streams on each whole-stream peer and mode (a fresh driver process
    each), like :func:`learnedidx.workloads.cli.run_peers` for in-process peers.  A run that
    fails (the driver refuses the keys, or crashes) is reported through ``warn`` and skipped."""
    peers = [p for p in peers if PEERS[p][0].whole_streams]
    if not peers:
        return []
    fd, path = tempfile.mkstemp(prefix="lidx-stream-", suffix=".ops")
    os.close(fd)
    try:
        write_stream_file(path, load, run)
        reports = []
        for peer in peers:
            adapter = get_adapter(peer)
            for mode in modes:
                try:
                    reports += run_driver(adapter, path, mode)
                except WorkloadError as exc:
                    warn(str(exc))
        return reports
    finally:
        os.unlink(path)
