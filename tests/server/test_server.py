"""The accelerator server as a real process: protocol, shared memory, faults, offload from the store."""
from __future__ import annotations

import json
import os
import socket
import stat
import struct
import threading
import time

import numpy as np
import pytest

import learnedidx
from learnedidx.errors import RemoteError, ServerUnavailableError, TooLargeError
from learnedidx.server import protocol as P
from learnedidx.server.client import Client
from learnedidx.server.process import spawn
from learnedidx.server.server import Server, ServerConfig


def _raw(path):
    """A connection past the server's hello frame."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    assert P.read_frame(s) == P.HELLO
    return s


def test_health_stats_and_socket_is_private(server):
    mode = stat.S_IMODE(os.stat(server.socket_path).st_mode)
    assert mode & 0o077 == 0
    with Client(server.socket_path) as c:
        h, _ = c.call("health")
        assert h["status"] == "ok" and h["pid"] == server.pid and "train.full" in h["operations"]
        s, _ = c.call("stats")
        assert s["requests"] >= 1 and s["device"]["backend"] == "fpga-emu"


def test_train_round_trip_through_shared_memory(server):
    rng = np.random.default_rng(0)
    A = np.c_[np.ones(20000), rng.integers(0, 256, (20000, 20))].astype(float)
    b = np.argsort(np.argsort(A[:, 1] * 256 + A[:, 2] + rng.random(20000))).astype(float)
    with Client(server.socket_path) as c:
        res, arr = c.call("train.full", arrays={"A": A, "b": b})
        ref = A @ np.linalg.lstsq(A, b, rcond=None)[0]
        assert np.abs(A @ arr["coef"] - ref).max() < 1.0  # FP32 device vs FP64 host
        assert res["cycles"] > 0 and arr["R"].shape == (21, 21)
        res2, arr2 = c.call("train.incremental", arrays={"R_old": arr["R"], "A_delta": A[:100], "A": A, "b": b})
        assert np.all(np.isfinite(arr2["coef"]))
    leftovers = [p for p in os.listdir(P.SHM_DIR) if p.startswith(P.SHM_PREFIX + str(os.getpid()))]
    assert leftovers == []


def test_concurrent_clients(server):
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        A = np.c_[np.ones(500), rng.random((500, 5))]
        b = A @ np.arange(6.0)
        try:
            with Client(server.socket_path) as c:
                for _ in range(5):
                    _, arr = c.call("train.full", arrays={"A": A, "b": b})
                    if not np.allclose(arr["coef"], np.arange(6.0), atol=0.05):
                        errors.append(arr["coef"])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("payload", [b"GARBAGE!" * 4, struct.pack(">2sBBI", b"LX", 9, 0, 2) + b"{}",
                                     struct.pack(">2sBBI", b"LX", 1, 0, 1 << 31),
                                     struct.pack(">2sBBI", b"LX", 1, 0, 5) + b"nope!",
                                     struct.pack(">2sBBI", b"LX", 1, 0, 2) + b"[]"])
def test_malformed_frames_get_protocol_errors_and_server_survives(server, payload):
    s = _raw(server.socket_path)
    s.sendall(payload)
    reply = P.read_frame(s)
    assert reply["ok"] is False and reply["error"]["kind"] == "protocol"
    s.close()
    with Client(server.socket_path) as c:
        assert c.call("health")[0]["status"] == "ok"


def test_bad_requests_get_error_replies(server):
    with Client(server.socket_path) as c:
        with pytest.raises(RemoteError) as e:
            c.call("no.such.op")
        assert e.value.kind == "unknown-op"
        with pytest.raises(RemoteError) as e:
            c.call("train.full", arrays={"A": np.ones((3, 2))})  # b missing
        assert e.value.kind == "bad-request"
        with pytest.raises(RemoteError):
            c.call("train.full", arrays={"A": np.full((3, 2), np.nan), "b": np.ones(3)})
    s = _raw(server.socket_path)
    P.write_frame(s, {"op": "train.full", "id": 1, "arrays": {"A": {"shm": "learnedidx-missing", "dtype": "<f8", "shape": [3, 2]}}})
    assert P.read_frame(s)["error"]["kind"] == "bad-request"
    P.write_frame(s, {"op": "train.full", "id": 2, "arrays": {"A": {"shm": "../../etc/passwd", "dtype": "<f8", "shape": [1]}}})
    assert P.read_frame(s)["error"]["kind"] == "bad-request"
    s.close()


def test_client_disconnecting_mid_request_does_not_kill_server(server):
    s = _raw(server.socket_path)
    s.sendall(struct.pack(">2sBBI", b"LX", 1, 0, 100) + b'{"op": ')
    s.close()
    with Client(server.socket_path) as c:
        assert c.call("health")[0]["status"] == "ok"


def test_tcp_needs_the_token(tmp_path):
    tok = tmp_path / "token"
    tok.write_text("s3cret")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = spawn(str(tmp_path / "t.sock"), extra_args=["--tcp", f"127.0.0.1:{port}", "--token-file", str(tok)])
    try:
        with Client(("127.0.0.1", port), token="wrong") as c:
            with pytest.raises(RemoteError) as e:
                c.call("health")
            assert e.value.kind == "auth"
        with Client(("127.0.0.1", port), token="s3cret") as c:
            assert c.call("health")[0]["status"] == "ok"
    finally:
        proc.stop()


def test_server_killed_mid_job_then_restarted(tmp_path):
    path = str(tmp_path / "k.sock")
    proc = spawn(path, backend="cpu")
    rng = np.random.default_rng(1)
    A = np.c_[np.ones(300_000), rng.random((300_000, 60))]
    b = np.arange(300_000.0)
    c = Client(path, timeout=30)
    t = threading.Timer(0.3, proc.kill)
    t.start()
    t0 = time.time()
    with pytest.raises(ServerUnavailableError):
        for _ in range(50):
            c.call("train.full", arrays={"A": A, "b": b})
    assert time.time() - t0 < 30
    c.close()
    proc2 = spawn(path, backend="cpu")
    try:
        with Client(path) as c2:
            assert c2.call("health")[0]["pid"] == proc2.pid
    finally:
        proc2.stop()


def test_store_offloads_to_server_and_survives_its_death(tmp_path):
    path = str(tmp_path / "o.sock")
    proc = spawn(path, backend="fpga-emu")
    ref = {}
    with learnedidx.open(retrain="background", retrain_interval=0.01, buffer_threshold=8, group_size=128,
                         trainer="server", trainer_options={"socket": path, "timeout": 10}) as db:
        for i in range(3000):
            k = f"user{(i * 7919) % 100003:06d}".encode()
            db.put(k, b"%d" % i)
            ref[k] = b"%d" % i
            if i == 1500:
                db.retrain_now()
                assert db.stats()["device_cycles"] > 0  # trained on the server's emulated FPGA
                proc.kill()
        db.retrain_now()
        s = db.stats()
        assert s["trainer_failed"] is True  # fell back to in-process training
        assert db.get_many(list(ref)) == list(ref.values())
        assert len(db) == len(ref)


def test_oversized_arrays_get_too_large_replies(tmp_path):
    from learnedidx.server.server import Server, ServerConfig

    srv = Server(ServerConfig(socket_path=str(tmp_path / "big.sock"), max_array_bytes=64 << 10))
    srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        with Client(srv.config.socket_path) as c:
            with pytest.raises(RemoteError) as e:
                c.call("train.full", arrays={"A": np.ones((5000, 2)), "b": np.ones(5000)})
            assert e.value.kind == "too-large"
            refs, paths = P.export_arrays({"A": np.ones((4, 2)), "b": np.ones(4)})
            refs["A"]["shape"] = [1 << 62, 1 << 62]  # its byte count overflows int64
            s = _raw(srv.config.socket_path)
            try:
                P.write_frame(s, {"op": "train.full", "id": 7, "arrays": refs})
                assert P.read_frame(s)["error"]["kind"] == "too-large"
            finally:
                s.close()
                P.unlink(paths)
            assert c.call("health")[0]["status"] == "ok"
            assert c.call("train.full", arrays={"A": np.ones((50, 2)), "b": np.arange(50.0)})[1]["coef"].shape == (2,)
    finally:
        srv.stop()
        t.join(5)


def test_cli_start_foreground_and_daemon_status_stop(tmp_path):
    import subprocess
    import sys

    cli = [sys.executable, "-m", "learnedidx.cli", "server"]
    bad = subprocess.run(cli + ["start", "--socket", str(tmp_path / "x.sock"), "--set", "units=0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "units" in bad.stderr
    fg_sock = str(tmp_path / "f" / "accel.sock")
    fg = subprocess.Popen(cli + ["start", "--socket", fg_sock, "--backend", "cpu"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        from learnedidx.server.process import wait_ready

        assert wait_ready(fg_sock, 60, fg)["pid"] == fg.pid
        assert subprocess.run(cli + ["stop", "--socket", fg_sock], capture_output=True, timeout=60).returncode == 0
        assert fg.wait(10) == 0
    finally:
        if fg.poll() is None:
            fg.kill()
    sock = str(tmp_path / "d" / "accel.sock")
    out = subprocess.run(cli + ["start", "--daemon", "--socket", sock, "--backend", "fpga-emu", "--set", "units=2",
                                "--set", "precision=fp64"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pid = int(open(sock + ".pid").read())
    try:
        st = subprocess.run(cli + ["status", "--socket", sock], capture_output=True, text=True, timeout=60)
        assert st.returncode == 0
        info = json.loads(st.stdout)
        assert info["health"]["pid"] == pid and info["stats"]["device"]["backend"] == "fpga-emu"
        cfg = info["stats"]["device"]["config"]
        assert (cfg["units"], cfg["precision"], cfg["pus_per_unit"], cfg["max_features"]) == (2, "fp64", 2, 32)
    finally:
        subprocess.run(cli + ["stop", "--socket", sock], capture_output=True, timeout=60)
    assert not os.path.exists(sock) and not os.path.exists(sock + ".pid")
    with pytest.raises(ServerUnavailableError):
        Client(sock, timeout=2).call("health")


def test_arrays_of_one_message_share_one_segment():
    from learnedidx.errors import ProtocolError

    arrays = {"A": np.arange(12.0).reshape(4, 3), "empty": np.zeros((0, 3)), "i": np.arange(5, dtype=np.int16),
              "f": np.float32([1.5, -2.0])}
    refs, paths = P.export_arrays(arrays)
    try:
        assert len(paths) == 1 and len(P.shm_names(refs)) == 1
        assert all(r["offset"] % P.ALIGN == 0 for r in refs.values())
        back = P.import_arrays(refs)
        for k, a in arrays.items():
            assert back[k].dtype == a.dtype and np.array_equal(back[k], a)
        with pytest.raises(TooLargeError):
            P.import_arrays(refs, max_bytes=64)
        with pytest.raises(ProtocolError):
            P.import_arrays({"A": {**refs["A"], "offset": 1 << 20}})
    finally:
        P.unlink(paths)
    assert P.export_arrays({}) == ({}, [])


def test_daemon_started_beside_a_clone_named_learnedidx_imports_the_installed_package(tmp_path):
    """``learnedidx server start --daemon`` run from the parent directory of a clone named
    learnedidx: the clone must not shadow the installed package in the server process."""
    import subprocess
    import sys
    from pathlib import Path

    clone = tmp_path / "learnedidx"
    (clone / "docs").mkdir(parents=True)
    (clone / "README.md").write_text("a clone, not a package\n")
    sock = str(tmp_path / "run" / "accel.sock")
    cli = [str(Path(sys.executable).parent / "learnedidx"), "server"]  # the installed command
    out = subprocess.run(cli + ["start", "--daemon", "--socket", sock], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert out.returncode == 0, out.stderr
    try:
        with Client(sock, timeout=10) as c:
            health = c.call("health")[0]
        assert health["status"] == "ok" and health["version"] == learnedidx.__version__
        assert health["missing_handler_modules"].get("learnedidx.server.handlers.train") is None
    finally:
        subprocess.run(cli + ["stop", "--socket", sock], capture_output=True, timeout=60)



def test_a_reply_larger_than_the_protocol_allows_becomes_a_too_large_error(tmp_path):
    """The client refuses frames over max_message_bytes: the server answers too-large instead
    of sending one (a grouped model with very many groups and features, say)."""
    server = Server(ServerConfig(socket_path=str(tmp_path / "s.sock"), max_message_bytes=1000))
    a, b = socket.socketpair()
    with a, b:
        assert server._reply(a, {"id": 7, "ok": True, "result": {"model": list(range(500))}})
        reply = P.read_frame(b)
    assert (reply["id"], reply["ok"], reply["error"]["kind"], reply["error"]["sqlstate"]) == \
        (7, False, "too-large", TooLargeError.sqlstate)
    assert "exceeds the protocol's limit of 1,000" in reply["error"]["message"]
