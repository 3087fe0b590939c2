"""Workloads: YCSB generators and runner, Twitter cache traces, peer adapters."""
