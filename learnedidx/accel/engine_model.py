"""Cycle model of the emulated FPGA analytics engines (DAnA-style): per-tuple update pipelines.

Each analytic unit streams tuples from the Striders and applies the update; ``units`` engines
run in parallel and merge their models once per epoch through a reduction tree.
"""
from __future__ import annotations

import math

#: Operations per tuple per feature for the built-in algorithms (multiply-adds of the
#: forward dot product and the update; closed forms accumulate d² products).
OPS_PER_FEATURE = {"linregr": None, "logregr": None, "svm": 3, "lmf": 6}

UNITS = 16  #: analytic units
LANES = 8  #: multiply-add lanes per unit
CLOCK_MHZ = 150.0
BANDWIDTH_GBPS = 10.0  #: Strider page bandwidth into the engines
LAT_NONLINEAR = 20  #: sigmoid / exp pipeline


def modelled_cycles(algorithm: str, rows: int, d: int, epochs: int, units: int = UNITS,
                    lanes: int = LANES) -> int:
    if algorithm in ("linregr", "logregr"):
        per_tuple = math.ceil(d * (d + 1) / 2 / lanes)  # outer-product accumulation (Gram/Hessian)
        solve = d ** 3 // lanes
    else:
        per_tuple = math.ceil(OPS_PER_FEATURE.get(algorithm, 4) * d / lanes)
        solve = 0
    nonlinear = LAT_NONLINEAR if algorithm in ("logregr", "svm") else 0
    per_epoch = math.ceil(rows / units) * per_tuple + nonlinear + math.ceil(math.log2(max(units, 2))) * d + solve
    stream = math.ceil(rows * (d + 1) * 8 / (BANDWIDTH_GBPS * 1e9) * CLOCK_MHZ * 1e6)
    return epochs * max(per_epoch, stream)


def modelled_seconds(algorithm: str, rows: int, d: int, epochs: int) -> float:
    return modelled_cycles(algorithm, rows, d, epochs) / (CLOCK_MHZ * 1e6)
