"""Peers with one interface, for measuring the learned index against them in the same run.

Every adapter offers ``put``, ``get``, ``delete``, ``scan(start, n)``, ``get_many``,
``put_many``, ``scan_many``, ``apply_many`` (reads and writes in order) and ``close``.
A peer whose package does not import (or that cannot open here) is reported by
:func:`available_peers` and skipped, never a failure.  A peer that is a separate program
(``whole_streams``: SIndex through its driver) is driven by :mod:`learnedidx.workloads.sindex`
instead, a whole stream at a time.
"""
from __future__ import annotations

import bisect
import itertools
import os
import shutil
import subprocess
import tempfile
from typing import Callable, Sequence

import learnedidx
from learnedidx.errors import WorkloadError
from learnedidx.workloads import streamfile


def _scratch_dir(prefix: str) -> str:
    """A temporary directory, on tmpfs (/dev/shm) when there is one, so disk I/O is not measured."""
    shm = "/dev/shm"
    return tempfile.mkdtemp(prefix=prefix, dir=shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None)


class Adapter:
    name = "?"
    thread_safe = False  # may several threads call it at once (``execute(threads=N)``)?
    scans = True  # False: workloads with scans skip this peer
    # True: a separate program that runs whole stream files and times itself; it has no
    # per-call methods, and only callers that ask for such peers get it (available_peers).
    whole_streams = False

    def put(self, k: bytes, v: bytes) -> None: ...
    def get(self, k: bytes): ...
    def delete(self, k: bytes) -> None: ...
    def scan(self, k: bytes, n: int) -> list: ...

    def get_many(self, keys: Sequence[bytes]) -> list:
        return list(map(self.get, keys))  # a C loop: the cheapest batch a Python store has

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        for k, v in zip(keys, values):
            self.put(k, v)

    def scan_many(self, keys: Sequence[bytes], n: int | Sequence[int]) -> list:
        """Scans of ``n`` pairs from each key (``n``: one count, or one per key)."""
        counts = itertools.repeat(n) if isinstance(n, int) else n
        return [self.scan(k, c) for k, c in zip(keys, counts)]

    def apply_many(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> list:
        """Reads (value None) and writes in order; read results where reads were, else None.

        This default runs each stretch of reads through ``get_many`` and each stretch of
        writes through ``put_many``, so a read sees every earlier write."""
        out: list = [None] * len(keys)
        i, n = 0, len(keys)
        while i < n:
            reading = values[i] is None
            j = i + 1
            while j < n and (values[j] is None) == reading:
                j += 1
            if reading:
                out[i:j] = self.get_many(keys[i:j])
            else:
                self.put_many(keys[i:j], values[i:j])
            i = j
        return out

    def finish(self) -> None:
        """Do the work the peer deferred during a phase (writes buffered and not merged,
        models not retrained): timed with the phase, since a run whose writes still wait
        to be merged has not done the same work as one whose writes are in place."""

    def close(self) -> None:
        pass


_warm = False  # this process has run every kernel (a child forked from it inherits them)

#: The stages of :func:`warm_up_learned_index`, as it reports them.
WARM_UP_STAGES = ("opening a store", "a bulk load", "writes, fold-ins and splits", "a batch of writes",
                  "deletes and retraining", "reads and scans")


def warm_up_learned_index(stage: Callable[[str], None] | None = None) -> None:
    """Run every kernel a run uses once, so that Numba compilation (or cache loading) is
    never timed: reads, scans, writes, fold-ins and splits (a tiny buffer and tiny groups),
    deletes, and retraining many groups at once.  ``stage`` is called with each of
    :data:`WARM_UP_STAGES` as it begins (compiling them all takes minutes the first time)."""
    global _warm
    say = stage or (lambda _: None)
    say(WARM_UP_STAGES[0])
    with learnedidx.open(retrain="off", group_size=16, buffer_threshold=4) as db:
        keys = [b"warm%03d" % i for i in range(0, 256, 2)]
        more = [b"warm%03d" % i for i in range(1, 256, 2)]
        db.get(b"x")
        say(WARM_UP_STAGES[1])
        db.put_many(keys, keys)
        say(WARM_UP_STAGES[2])
        for k in more[:40]:
            db.put(k, k)
        say(WARM_UP_STAGES[3])
        db.apply_many(more[40:] + keys[:8], more[40:] + [None] * 8)  # fold-ins inside a batch
        say(WARM_UP_STAGES[4])
        db.delete(keys[5])
        db.retrain_now()
        db.put(b"warm-extra", b"v")
        say(WARM_UP_STAGES[5])
        db.get(keys[3]), db.get_many(keys), db.scan(keys[0], 5), list(db.range(keys[0], keys[9]))
        db.scan_many(keys[:4], 3), db.scan_many(keys[:4], [1, 2, 3, 4])
    _warm = True


def learned_index_warm() -> bool:
    """Whether this process has run :func:`warm_up_learned_index`."""
    return _warm


class LearnedIndexAdapter(Adapter):
    thread_safe = True

    def __init__(self, name: str = "learnedidx", **options) -> None:
        self.name = name
        if not _warm:
            warm_up_learned_index()
        self.db = learnedidx.open(**options)
        self.get = self.db.get
        self.put = self.db.put
        self.delete = self.db.delete
        self.scan = self.db.scan
        self.get_many = self.db.get_many
        self.put_many = self.db.put_many
        self.scan_many = self.db.scan_many
        self.apply_many = self.db.apply_many

    def finish(self) -> None:
        self.db.retrain_now()  # every buffer folded in, every due group retrained

    def close(self) -> None:
        self.db.close()


class ServerTrainedAdapter(LearnedIndexAdapter):
    """The store retraining on an accelerator server of its own (``device``: the server's
    backend), a process started with the adapter and stopped with it; neither is timed."""

    def __init__(self, name: str, device: str = "cpu", **options) -> None:
        from learnedidx.server.process import spawn

        self._dir = _scratch_dir("lidx-peer-server-")
        self._server = spawn(os.path.join(self._dir, "accel.sock"), backend=device, warm=True)
        try:
            super().__init__(name, trainer="server", trainer_options={"socket": self._server.socket_path},
                             **options)
        except BaseException:
            self._stop()
            raise

    def finish(self) -> None:
        super().finish()
        if self.db.stats()["trainer_failed"]:  # its figures would be in-process training's
            raise WorkloadError(f"peer {self.name}: the accelerator server failed; the store trained in-process")

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._stop()

    def _stop(self) -> None:
        self._server.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


class SortedDictAdapter(Adapter):
    name = "sorteddict"

    def __init__(self) -> None:
        from sortedcontainers import SortedDict

        self.d = SortedDict()
        self.get = self.d.get
        self.put = self.d.__setitem__

    def delete(self, k):
        self.d.pop(k, None)

    def scan(self, k, n):
        d = self.d
        return [(x, d[x]) for x in itertools.islice(d.irange(minimum=k), n)]


class DictAdapter(Adapter):
    """Python's ``dict``: no order, so no scans; a hash lookup as cheap as a Python call gets.
    Beside a compiled peer it shows what the runner's own loop costs a Python peer per
    operation (the floor under every Python peer's per-op figures)."""

    name = "dict"
    scans = False

    def __init__(self) -> None:
        self.d: dict = {}
        self.get = self.d.get
        self.put = self.d.__setitem__

    def delete(self, k):
        self.d.pop(k, None)

    def scan(self, k, n):
        raise WorkloadError("the dict peer has no order: no scans")


class OOBTreeAdapter(Adapter):
    name = "oobtree"

    def __init__(self) -> None:
        from BTrees.OOBTree import OOBTree

        self.t = OOBTree()
        self.get = self.t.get
        self.put = self.t.__setitem__

    def delete(self, k):
        self.t.pop(k, None)

    def scan(self, k, n):
        return list(itertools.islice(self.t.items(min=k), n))


class SortedListAdapter(Adapter):
    """A plain sorted list + bisect: keys and values in two aligned Python lists."""

    name = "sortedlist"

    def __init__(self) -> None:
        self.keys: list = []
        self.vals: list = []

    def _find(self, k) -> tuple[int, bool]:
        """Where ``k`` is or would go, and whether it is there."""
        i = bisect.bisect_left(self.keys, k)
        return i, i < len(self.keys) and self.keys[i] == k

    def get(self, k):
        i, found = self._find(k)
        return self.vals[i] if found else None

    def put(self, k, v):
        i, found = self._find(k)
        if found:
            self.vals[i] = v
        else:
            self.keys.insert(i, k)
            self.vals.insert(i, v)

    def put_many(self, keys, values):
        if self.keys:
            return super().put_many(keys, values)
        d = dict(zip(keys, values))  # a load into an empty list: one sort, later values win
        self.keys = sorted(d)
        self.vals = [d[k] for k in self.keys]

    def delete(self, k):
        i, found = self._find(k)
        if found:
            del self.keys[i], self.vals[i]

    def scan(self, k, n):
        i = bisect.bisect_left(self.keys, k)
        return list(zip(self.keys[i:i + n], self.vals[i:i + n]))


class LmdbAdapter(Adapter):
    name = "lmdb"
    thread_safe = True

    def __init__(self, map_size: int = 1 << 34) -> None:
        import lmdb

        self.dir = _scratch_dir("lidx-lmdb-")
        self.env = lmdb.open(self.dir, map_size=map_size, sync=False, metasync=False, writemap=True, max_dbs=0)

    def put(self, k, v):
        with self.env.begin(write=True) as t:
            t.put(k, v)

    def put_many(self, keys, values):
        with self.env.begin(write=True) as t:
            for k, v in zip(keys, values):
                t.put(k, v)

    def get(self, k):
        with self.env.begin(buffers=False) as t:
            return t.get(k)

    def get_many(self, keys):
        with self.env.begin() as t:
            g = t.get
            return [g(k) for k in keys]

    def delete(self, k):
        with self.env.begin(write=True) as t:
            t.delete(k)

    def scan(self, k, n):
        with self.env.begin() as t:
            c = t.cursor()
            if not c.set_range(k):
                return []
            return list(itertools.islice(c.iternext(), n))

    def close(self):
        self.env.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class RocksdictAdapter(Adapter):
    name = "rocksdict"
    thread_safe = True

    def __init__(self) -> None:
        from rocksdict import Options, Rdict, WriteOptions

        self.dir = _scratch_dir("lidx-rocks-")
        self.db = Rdict(self.dir, options=Options(raw_mode=True))
        wo = WriteOptions()
        wo.disable_wal = True
        self.db.set_write_options(wo)

    def put(self, k, v):
        self.db[k] = v

    def get(self, k):
        return self.db.get(k)

    def get_many(self, keys):
        return self.db.get(list(keys))

    def delete(self, k):
        del self.db[k]

    def finish(self) -> None:
        self.db.flush()  # the memtable written out (compactions stay RocksDB's own business)

    def scan(self, k, n):
        it = self.db.iter()
        it.seek(k)
        out = []
        while it.valid() and len(out) < n:
            out.append((it.key(), it.value()))
            it.next()
        return out

    def close(self):
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class ArtAdapter(Adapter):
    """Adaptive radix tree: ``blart.TreeMap`` (PyPI ``blart-py``), point operations only.

    Its keys are ``str`` and must be prefix-free (a key that is a prefix of another silently
    replaces it), so a key is stored as its bytes decoded as Latin-1 plus a NUL terminator;
    keys containing NUL are rejected.  It has no seek: ``prefix_iter`` copies a whole subtree
    (docs/workloads.md), so ``scan`` is not offered and workloads with scans skip it.
    """

    name = "art"
    scans = False

    def __init__(self) -> None:
        from blart import TreeMap

        self.t = TreeMap()
        tget = self.t.get
        # Reads skip put's NUL check: a query with a NUL inside never equals a stored key
        # (whose only NUL ends it), so it is simply not found.  One call, as few bytecodes
        # as the learned index's own get.
        self.get = lambda k: tget(k.decode("latin-1") + "\0")

    @staticmethod
    def _key(k: bytes) -> str:
        if 0 in k:
            raise WorkloadError("the art peer cannot store keys containing NUL bytes")
        return k.decode("latin-1") + "\0"

    def put(self, k, v):
        self.t.insert(self._key(k), v)

    def delete(self, k):
        try:
            self.t.remove(self._key(k))
        except KeyError:
            pass

    def scan(self, k, n):
        raise WorkloadError("the art peer (blart-py) has no ordered seek: no scans")


SINDEX_DRIVER_ENV = "LEARNEDIDX_SINDEX_DRIVER"
SINDEX_BUILD_HINT = (f"build learnedidx/workloads/sindex_driver.cc against casys-kaist/sia as docs/workloads.md "
                     f"says (\"The sindex peer\"), then set {SINDEX_DRIVER_ENV} or pass --sindex-driver")


def sindex_driver() -> str:
    """The SIndex driver program named by ``$LEARNEDIDX_SINDEX_DRIVER``, checked to be one
    that reads this version's stream files."""
    path = os.environ.get(SINDEX_DRIVER_ENV, "")
    if not path:
        raise WorkloadError(f"the SIndex driver is not built or not named: {SINDEX_BUILD_HINT}")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise WorkloadError(f"{SINDEX_DRIVER_ENV}={path} is not an executable file: {SINDEX_BUILD_HINT}")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        raise WorkloadError(f"{path} --version failed ({exc}): {SINDEX_BUILD_HINT}") from None
    if out != ["learnedidx-sindex-driver", str(streamfile.FORMAT)]:
        raise WorkloadError(f"{path} is not a SIndex driver for stream format {streamfile.FORMAT} "
                            f"(--version said {' '.join(out)!r}): {SINDEX_BUILD_HINT}")
    return path


class SIndexAdapter(Adapter):
    """SIndex (C++, casys-kaist/sia ``original/``) as released, through our driver program.

    The driver times itself and runs whole stream files (:mod:`learnedidx.workloads.sindex`),
    so the per-call methods only say so."""

    name = "sindex"
    whole_streams = True
    fix_exited = False  # the driver's --fix-exited: see docs/workloads.md

    def __init__(self) -> None:
        self.driver = sindex_driver()

    def _whole_streams_only(self, *args, **kwargs):
        raise WorkloadError(f"peer {self.name} runs whole operation streams in its driver program; "
                            "learnedidx bench compare drives it")

    get = put = delete = scan = get_many = put_many = scan_many = apply_many = _whole_streams_only


class SIndexFixedAdapter(SIndexAdapter):
    """SIndex with ``config.exited`` cleared after construction, so that its RCU barrier waits."""

    name = "sindex-fixed"
    fix_exited = True


#: name -> (adapter class, options); only the learned index takes options (for ``learnedidx.open``).
PEERS: dict[str, tuple[type[Adapter], dict]] = {
    "learnedidx": (LearnedIndexAdapter, {"retrain": "background"}),
    "learnedidx-inline": (LearnedIndexAdapter, {"retrain": "inline"}),
    "learnedidx-fpga": (LearnedIndexAdapter, {"retrain": "background", "trainer": "fpga-emu"}),
    "learnedidx-server": (ServerTrainedAdapter, {"retrain": "background", "device": "cpu"}),
    "learnedidx-server-fpga": (ServerTrainedAdapter, {"retrain": "background", "device": "fpga-emu"}),
    "dict": (DictAdapter, {}),
    "sorteddict": (SortedDictAdapter, {}),
    "oobtree": (OOBTreeAdapter, {}),
    "sortedlist": (SortedListAdapter, {}),
    "lmdb": (LmdbAdapter, {}),
    "rocksdict": (RocksdictAdapter, {}),
    "art": (ArtAdapter, {}),
    "sindex": (SIndexAdapter, {}),
    "sindex-fixed": (SIndexFixedAdapter, {}),
}


def get_adapter(name: str, **options) -> Adapter:
    """A fresh adapter for peer ``name`` (``options`` go to ``learnedidx.open`` for the learned index)."""
    try:
        cls, defaults = PEERS[name]
    except KeyError:
        raise WorkloadError(f"unknown peer {name!r}; known: {sorted(PEERS)}") from None
    return cls(name, **{**defaults, **options}) if issubclass(cls, LearnedIndexAdapter) else cls()


def available_peers(names: Sequence[str] | None = None, *,
                    whole_streams: bool = False) -> tuple[list[str], dict[str, str]]:
    """(names that work here, {name: why skipped}) among ``names`` (default: every peer).

    A peer is skipped, with the reason, when its package does not import or it fails to open,
    and a ``whole_streams`` peer also unless the caller can drive one (``whole_streams=True``)."""
    ok, skipped = [], {}
    for name in PEERS if names is None else names:
        if name not in PEERS:
            skipped[name] = f"unknown peer; known: {', '.join(PEERS)}"
            continue
        try:
            get_adapter(name).close()
        except Exception as exc:  # noqa: BLE001 - any failure to open means "not available here"
            skipped[name] = f"{type(exc).__name__}: {exc}"
            continue
        if PEERS[name][0].whole_streams and not whole_streams:
            skipped[name] = "runs whole operation streams in its driver program: only learnedidx bench compare drives it"
        else:
            ok.append(name)
    return ok, skipped
