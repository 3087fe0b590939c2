"""The accelerator: training backends (``fpga-emu``, ``server``), the emulated FPGA datapath
and its cycle model, and the server's device."""
from learnedidx.accel.backends import FpgaEmuBackend, ServerBackend
from learnedidx.index.training import register_backend

register_backend("fpga-emu", FpgaEmuBackend)
register_backend("server", ServerBackend)

__all__ = ["FpgaEmuBackend", "ServerBackend"]
