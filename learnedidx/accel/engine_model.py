"""Cycle model of the emulated FPGA analytics engines (DAnA-style): per-tuple update pipelines.

Each analytic unit streams tuples from the Striders and applies the compiled algorithm's
per-tuple work; ``units`` engines run in parallel and merge their models (or sum their
accumulators) once per epoch through a reduction tree, then an optional epoch-level update
(a d×d solve) runs.  The per-tuple work comes from the DSL compiler as a :class:`KernelCost`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

UNITS = 16  #: analytic units
LANES = 8  #: multiply-add lanes per unit
CLOCK_MHZ = 150.0
BANDWIDTH_GBPS = 10.0  #: Strider page bandwidth into the engines
LAT_NONLINEAR = 20  #: sigmoid / exp pipeline


@dataclass(frozen=True)
class KernelCost:
    """Per-tuple work of a compiled algorithm (counted from its DSL source)."""

    vector_ops: int  #: operations per feature (dot products, scaled vectors)
    matrix_ops: int = 0  #: operations per feature² (outer-product accumulators)
    nonlinear: bool = False  #: sigmoid / exp / log in the per-tuple path
    solve: bool = False  #: a d×d solve in the epoch-level update


def modelled_cycles(cost: KernelCost, rows: int, d: int, epochs: int, units: int = UNITS,
                    lanes: int = LANES) -> int:
    """Cycles for ``epochs`` passes over ``rows`` tuples of ``d`` features (or factor rank)."""
    per_tuple = max(1, math.ceil((cost.vector_ops * d + cost.matrix_ops * d * d) / lanes))
    solve = d ** 3 // lanes if cost.solve else 0
    nonlinear = LAT_NONLINEAR if cost.nonlinear else 0
    per_epoch = math.ceil(rows / units) * per_tuple + nonlinear + math.ceil(math.log2(max(units, 2))) * d + solve
    stream = math.ceil(rows * (d + 1) * 8 / (BANDWIDTH_GBPS * 1e9) * CLOCK_MHZ * 1e6)
    return epochs * max(per_epoch, stream)


def modelled_seconds(cost: KernelCost, rows: int, d: int, epochs: int) -> float:
    return modelled_cycles(cost, rows, d, epochs) / (CLOCK_MHZ * 1e6)
