"""Typed errors raised by learnedidx.

Every error a user can provoke with bad input derives from :class:`LearnedIdxError`
and, where Python has a natural builtin, from that builtin too, so that
``except TypeError`` / ``except ValueError`` keep working.
"""
from __future__ import annotations


class LearnedIdxError(Exception):
    """Base class of every error raised by learnedidx."""


class KeyTypeError(LearnedIdxError, TypeError):
    """A key or value had a type other than bytes-like (or str for keys)."""


class KeyLengthError(LearnedIdxError, ValueError):
    """A key was empty or longer than the store's ``max_key_len``."""


class StoreClosedError(LearnedIdxError, RuntimeError):
    """An operation was attempted on a closed store."""


class CorruptLogError(LearnedIdxError):
    """A write-ahead log or checkpoint could not be read (raised only where recovery cannot cut a tail)."""


class ConfigError(LearnedIdxError, ValueError):
    """An option had an invalid value."""


class ProtocolError(LearnedIdxError):
    """A malformed or unsupported accelerator-server message."""


class ServerUnavailableError(LearnedIdxError, ConnectionError):
    """The accelerator server could not be reached or died mid-request."""


class RemoteError(LearnedIdxError):
    """The accelerator server answered a request with an error reply."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class WorkloadError(LearnedIdxError, ValueError):
    """A workload definition, property file or trace was invalid."""


class TraceFormatError(WorkloadError):
    """A malformed line in a cache trace (carries the line number)."""

    def __init__(self, lineno: int, message: str) -> None:
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


class InDBError(LearnedIdxError):
    """An in-database training or prediction request failed."""
