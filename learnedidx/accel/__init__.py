"""The accelerator: training backends (cpu, fpga-emu, server) and the FPGA emulation with its cycle model."""
