"""The emulated FPGA: its parameters (``config``), the training datapath and its cycle model
(``fpga``), the analytics engines' cycle model (``engine_model``), and the in-process
``fpga-emu`` training backend (``backend``).  Pure computation: no server, no I/O."""
