"""Every error learnedidx raises, in one table.

Each class declares once its wire ``kind`` (what the accelerator server puts in an error
reply) and its ``sqlstate`` (what the PostgreSQL extension raises for it), as keyword
arguments of the class statement; :meth:`LearnedIdxError.__init_subclass__` registers the
kind, so the server's dispatch, the client and the extension share one mapping
(:data:`SQLSTATES`, :func:`error_class`).  Errors a user can provoke with bad input also
derive from the natural builtin, so that ``except TypeError`` / ``except ValueError`` keep
working.  SQLSTATE ``XX000`` (internal_error) is kept for real bugs.
"""
from __future__ import annotations

from typing import ClassVar

#: wire kind -> SQLSTATE, filled by the class statements below.
SQLSTATES: dict[str, str] = {}
_CLASSES: dict[str, type["LearnedIdxError"]] = {}


class LearnedIdxError(Exception):
    """Base class of every error raised by learnedidx."""

    kind: ClassVar[str] = "internal"
    sqlstate: ClassVar[str] = "XX000"
    #: What PostgreSQL shows as the error's HINT when the extension raises it (set per instance).
    hint: str | None = None

    def __init_subclass__(cls, kind: str | None = None, sqlstate: str | None = None, **kw) -> None:
        super().__init_subclass__(**kw)
        if kind is None:  # a subclass that refines its parent's message only
            if sqlstate is not None:
                raise TypeError(f"{cls.__name__} declares a SQLSTATE without a kind")
            return
        if kind in _CLASSES:
            raise TypeError(f"error kind {kind!r} declared twice ({_CLASSES[kind].__name__}, {cls.__name__})")
        cls.kind = kind
        cls.sqlstate = sqlstate or cls.sqlstate
        if len(cls.sqlstate) != 5:
            raise TypeError(f"{cls.__name__}: a SQLSTATE has five characters, not {cls.sqlstate!r}")
        _CLASSES[kind] = cls
        SQLSTATES[kind] = cls.sqlstate


SQLSTATES[LearnedIdxError.kind] = LearnedIdxError.sqlstate
_CLASSES[LearnedIdxError.kind] = LearnedIdxError


def error_class(kind: str) -> type[LearnedIdxError]:
    """The class registered for wire ``kind`` (:class:`LearnedIdxError` for unknown kinds)."""
    return _CLASSES.get(kind, LearnedIdxError)


def kind_of(exc: BaseException) -> str:
    """The wire kind of any exception: its class's for learnedidx errors, ``internal`` else."""
    return exc.kind if isinstance(exc, LearnedIdxError) else LearnedIdxError.kind


# ------------------------------------------------------------------ configuration and input
class ConfigError(LearnedIdxError, ValueError, kind="config", sqlstate="22023"):
    """An option or parameter had an invalid value."""


class ArgumentTypeError(LearnedIdxError, TypeError, kind="argument-type", sqlstate="42804"):
    """An argument of a call had the wrong type (a scan count of 1.5, a ``str`` where a
    sequence of keys is expected)."""


class ArgumentError(LearnedIdxError, ValueError, kind="argument", sqlstate="22023"):
    """An argument of a call had a value out of range (a negative scan count, as many
    values as keys expected)."""


class KeyTypeError(ArgumentTypeError, kind="key-type", sqlstate="42804"):
    """A key or value had a type other than bytes-like (or str for keys)."""


class KeyLengthError(ArgumentError, kind="key-length", sqlstate="22023"):
    """A key was empty or longer than the store's ``max_key_len``."""


class RecordTooLargeError(ArgumentError, kind="record-too-large", sqlstate="54000"):
    """A write too large for one record of the write-ahead log (see docs/store.md)."""


class WorkloadError(LearnedIdxError, ValueError, kind="workload", sqlstate="22023"):
    """A workload definition, property file or trace was invalid."""


class TraceFormatError(WorkloadError, kind="trace-format", sqlstate="22P02"):
    """A malformed line in a cache trace (carries the line number)."""

    def __init__(self, lineno: int, message: str) -> None:
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno
        self.message = message

    def __reduce__(self):  # pickled (across processes) with its own arguments
        return type(self), (self.lineno, self.message)


# ------------------------------------------------------------------ the store
class StoreClosedError(LearnedIdxError, RuntimeError, kind="store-closed", sqlstate="55000"):
    """An operation was attempted on a closed store."""


class StoreForkedError(StoreClosedError, kind="store-forked", sqlstate="55000"):
    """A store opened in a parent process was used in a child made by ``fork()``: the child
    shares the parent's files, locks and threads' state, so its copy of the store refuses
    every operation and never touches the store's files (open the store again in the
    child once the parent has closed it)."""


class StoreLockedError(LearnedIdxError, RuntimeError, kind="store-locked", sqlstate="55006"):
    """Another process has the store directory open."""


class CorruptLogError(LearnedIdxError, kind="corrupt-log", sqlstate="XX001"):
    """A file of a store directory is damaged or missing (docs/store.md, Damaged files):
    ``path`` names the file, ``offset`` the first damaged byte (None: the whole file)."""

    def __init__(self, message: str, path: object = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset

    def __reduce__(self):
        return type(self), (self.args[0], self.path, self.offset)


class StoreIOError(LearnedIdxError, OSError, kind="store-io", sqlstate="58030"):
    """A store's file could not be created, written or synced (full disk, I/O error,
    permissions, a path that is not a directory); ``errno`` is the system's."""


class LogFailedError(StoreIOError, kind="log-failed", sqlstate="55000"):
    """An earlier write or sync of the write-ahead log failed: the store acknowledges no
    write until a checkpoint succeeds or the store is reopened (docs/store.md)."""


class LogRecoveryWarning(RuntimeWarning):
    """A torn log tail (an interrupted last write) was cut, or point-in-time recovery set
    part of the history aside, while a store was opened."""


# ------------------------------------------------------------------ the accelerator server
class ProtocolError(LearnedIdxError, kind="protocol", sqlstate="08P01"):
    """A malformed or unsupported accelerator-server message."""


class TooLargeError(ProtocolError, kind="too-large", sqlstate="54000"):
    """A request or its arrays exceed the server's limits."""


class ServerUnavailableError(LearnedIdxError, ConnectionError, kind="unavailable", sqlstate="08006"):
    """The accelerator server could not be reached or died mid-request."""


class AuthError(LearnedIdxError, kind="auth", sqlstate="28000"):
    """A request on the server's TCP listener without the right token."""


class UnsafePathError(LearnedIdxError, PermissionError, kind="unsafe-path", sqlstate="55000"):
    """A directory or file the server would use for its socket, pidfile or log is not safely
    its OS user's: another user owns or may write the directory, or a symbolic link, a hard
    link or a file of another kind is where a file of the server's belongs."""


class ServerRunningError(LearnedIdxError, kind="server-running", sqlstate="F0001"):
    """A server already runs with this socket or pidfile, or did not exit when stopped."""


class NoPidfileError(LearnedIdxError, FileNotFoundError, kind="no-pidfile", sqlstate="58P01"):
    """``server stop`` found no pidfile where it looked."""


class BadRequestError(LearnedIdxError, ValueError, kind="bad-request", sqlstate="22023"):
    """A request the server cannot act on (missing or ill-typed arguments)."""


class UnknownOperationError(LearnedIdxError, kind="unknown-op", sqlstate="42883"):
    """A request named an operation the server does not offer."""


class CacheMiss(LearnedIdxError, KeyError, kind="cache-miss", sqlstate="55000"):
    """``train.incremental`` named a group/version whose R the device does not hold."""


class DeviceError(LearnedIdxError, kind="device", sqlstate="58000"):
    """The training device failed (a fault of the device, not of the request)."""


class RemoteError(LearnedIdxError):
    """The accelerator server answered a request with an error reply of ``kind``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind  # type: ignore[misc]  # the reply's kind, per instance
        self.sqlstate = SQLSTATES.get(kind, LearnedIdxError.sqlstate)  # type: ignore[misc]
        self.message = message

    def __reduce__(self):
        return type(self), (self.kind, self.message)


#: Reply kinds that say the server or its device failed, not that the request was wrong.
_FAILURE_KINDS = frozenset({"internal", "device", "unavailable", "protocol", "too-large", "cache-miss"})


def is_offload_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says an offload target (the server, a device) failed, so that the
    work may be done in-process instead; a wrong request or configuration is not one."""
    if isinstance(exc, RemoteError):
        return exc.kind in _FAILURE_KINDS
    return isinstance(exc, (ServerUnavailableError, ProtocolError, DeviceError))


# ------------------------------------------------------------------ in-database ML
class InDBError(LearnedIdxError):
    """An in-database training or prediction request failed."""


class TrainingDataError(InDBError, ValueError, kind="bad-data", sqlstate="22023"):
    """The training data cannot be used (empty, NaN/Inf, wrong shape or labels)."""


class ParameterError(InDBError, ValueError, kind="bad-parameter", sqlstate="22023"):
    """A training parameter has a value the algorithm does not accept."""


class DSLError(InDBError, ValueError, kind="dsl", sqlstate="42601"):
    """An algorithm's source is not valid DSL, or cannot be compiled for the data."""


class UnknownAlgorithmError(InDBError, kind="unknown-algorithm", sqlstate="42704"):
    """No built-in or registered algorithm has the name asked for."""


class NotSupportedError(InDBError, kind="not-supported", sqlstate="0A000"):
    """A MADlib option this engine does not implement."""


class DSLRuntimeError(InDBError, kind="dsl-runtime", sqlstate="38000"):
    """An algorithm's own code failed while training (SQLSTATE class 38: an error of a
    user-defined routine), e.g. ``solve`` of a singular matrix in its ``update``."""


class DSLDivisionByZeroError(DSLRuntimeError, ZeroDivisionError, kind="division-by-zero", sqlstate="22012"):
    """An algorithm's own code divided by zero."""


class DSLOverflowError(DSLRuntimeError, OverflowError, kind="numeric-overflow", sqlstate="22003"):
    """An algorithm's own code computed a number out of range."""


class CancelledError(InDBError, kind="cancelled", sqlstate="57014"):
    """The caller gave up (its statement was cancelled): training stopped between rounds."""


class BuiltinNameError(InDBError, kind="builtin-name", sqlstate="42710"):
    """A user algorithm was to be registered under the name of a built-in one."""


class SQLSyntaxError(InDBError, ValueError, kind="sql-syntax", sqlstate="42601"):
    """An argument of a training function that holds SQL (``indep``, ``grouping_cols``) is
    malformed: an empty item of a list, say."""


class UndefinedColumnError(InDBError, kind="undefined-column", sqlstate="42703"):
    """An argument names a column the source does not have."""


class DuplicateColumnError(InDBError, kind="duplicate-column", sqlstate="42701"):
    """Two columns of an output table would have one name (a grouping column named as a
    statistic)."""


class DuplicateTableError(InDBError, kind="duplicate-table", sqlstate="42P07"):
    """A training function's output table or its summary table exists already."""


class NameTooLongError(InDBError, kind="name-too-long", sqlstate="42622"):
    """A name is too long for PostgreSQL's identifiers (63 bytes): an output table whose
    ``_summary`` table's name would be."""


class PagesUndecodableError(InDBError, kind="pages-undecodable", sqlstate="0A000"):
    """The pages hold a visible tuple the Strider cannot decode (TOAST, compression): the query
    path reads that source."""


class InsufficientPrivilegeError(InDBError, kind="insufficient-privilege", sqlstate="42501"):
    """The caller may not do what it asked: run SQL another role wrote (a model's feature
    expression), or read a model through its owner's row-level security policies."""


class NotAModelError(InDBError, kind="not-a-model", sqlstate="42809"):
    """A name given as a model's is not one: not a plain table with its summary table, or
    not of the algorithm asked for."""
