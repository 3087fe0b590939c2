"""Feature rows of group models, the entry point other modules (training benchmarks) use.

``build_features(arena, offsets, start, stop, prefix_len, feat_len)`` is a Numba kernel
returning a ``float64[stop-start, feat_len+1]`` matrix whose row i is
``[1.0, byte(prefix_len), byte(prefix_len+1), ...]`` of key ``start+i`` (zero-padded,
truncated to ``feat_len`` bytes).  It lives in :mod:`learnedidx.index.kernels` next to
the search kernels that share its byte layout; this module re-exports it.
"""
from learnedidx.index.kernels import build_features, common_prefix_len, max_key_len

__all__ = ["build_features", "common_prefix_len", "max_key_len"]
