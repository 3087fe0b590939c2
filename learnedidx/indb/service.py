"""Accelerator-server handlers for in-database training (indb.*)."""
