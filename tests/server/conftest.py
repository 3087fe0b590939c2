from __future__ import annotations

import pytest

from learnedidx.server.process import spawn


@pytest.fixture
def server(tmp_path):
    """A real server process on a private Unix socket (fpga-emu device)."""
    proc = spawn(str(tmp_path / "s" / "accel.sock"), backend="fpga-emu")
    yield proc
    proc.stop()
