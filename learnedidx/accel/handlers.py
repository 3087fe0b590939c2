"""Accelerator-server handlers for training requests."""
