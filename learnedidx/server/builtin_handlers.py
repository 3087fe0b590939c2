"""Built-in operations: ``health`` and ``stats``."""
