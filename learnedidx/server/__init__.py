"""Accelerator server: process, Unix socket, versioned protocol, shared-memory arrays."""
