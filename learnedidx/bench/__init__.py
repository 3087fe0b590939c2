"""Benchmarks: each module registers a ``learnedidx bench`` command."""
