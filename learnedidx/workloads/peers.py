"""Peers with one interface, for measuring the learned index against them in the same run.

Every adapter offers ``put``, ``get``, ``delete``, ``scan(start, n)``, ``get_many``,
``put_many``, ``scan_many`` and ``close``.  A peer whose package does not import is
reported by :func:`available_peers` and skipped, never a failure.
"""
from __future__ import annotations

import bisect
import itertools
import shutil
import tempfile
from typing import Callable, Sequence

import learnedidx


class Adapter:
    name = "?"

    def put(self, k: bytes, v: bytes) -> None: ...
    def get(self, k: bytes): ...
    def delete(self, k: bytes) -> None: ...
    def scan(self, k: bytes, n: int) -> list: ...

    def get_many(self, keys: Sequence[bytes]) -> list:
        return [self.get(k) for k in keys]

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        for k, v in zip(keys, values):
            self.put(k, v)

    def scan_many(self, keys: Sequence[bytes], n: int) -> list:
        return [self.scan(k, n) for k in keys]

    def settle(self) -> None:
        """Finish background work started by a load phase (not timed)."""

    def close(self) -> None:
        pass


def warm_up_learned_index() -> None:
    """Run every kernel once so that Numba compilation (or cache loading) is never timed."""
    with learnedidx.open(retrain="off", group_size=16) as db:
        keys = [b"warm%03d" % i for i in range(64)]
        db.get(b"x")
        db.put_many(keys, keys)
        db.retrain_now()
        db.put(b"warm-extra", b"v")
        db.get(keys[3]), db.get_many(keys), db.scan(keys[0], 5), db.scan_many(keys[:4], 3), list(db.range(keys[0], keys[9]))


class LearnedIndexAdapter(Adapter):
    def __init__(self, name: str = "learnedidx", **options) -> None:
        self.name = name
        warm_up_learned_index()
        self.db = learnedidx.open(**options)
        self.get = self.db.get
        self.put = self.db.put
        self.delete = self.db.delete
        self.scan = self.db.scan
        self.get_many = self.db.get_many
        self.put_many = self.db.put_many
        self.scan_many = self.db.scan_many

    def settle(self) -> None:
        self.db.retrain_now()

    def close(self) -> None:
        self.db.close()


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
    """A plain sorted list + bisect, with a dict for values."""

    name = "sortedlist"

    def __init__(self) -> None:
        self.keys: list = []
        self.vals: dict = {}
        self.get = self.vals.get

    def put(self, k, v):
        if k not in self.vals:
            bisect.insort(self.keys, k)
        self.vals[k] = v

    def delete(self, k):
        if self.vals.pop(k, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, k)]

    def scan(self, k, n):
        i = bisect.bisect_left(self.keys, k)
        vals = self.vals
        return [(x, vals[x]) for x in self.keys[i:i + n]]


class LmdbAdapter(Adapter):
    name = "lmdb"

    def __init__(self, map_size: int = 1 << 34) -> None:
        import lmdb

        self.dir = tempfile.mkdtemp(prefix="lidx-lmdb-")
        self.env = lmdb.open(self.dir, map_size=map_size, sync=False, metasync=False, writemap=True,
                             max_dbs=0, lock=False)

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

    def __init__(self) -> None:
        from rocksdict import Options, Rdict, WriteOptions

        self.dir = tempfile.mkdtemp(prefix="lidx-rocks-")
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
    """Adaptive radix tree (``blart-py``) when it installs."""

    name = "art"

    def __init__(self) -> None:
        import blart  # noqa: F401  (the import is what tells us it is available)

        raise ImportError("blart-py's API is not wired in this version")


PEERS: dict[str, Callable[..., Adapter]] = {
    "learnedidx": lambda **o: LearnedIndexAdapter("learnedidx", **{"retrain": "background", **o}),
    "learnedidx-inline": lambda **o: LearnedIndexAdapter("learnedidx-inline", **{"retrain": "inline", **o}),
    "sorteddict": lambda **o: SortedDictAdapter(),
    "oobtree": lambda **o: OOBTreeAdapter(),
    "sortedlist": lambda **o: SortedListAdapter(),
    "lmdb": lambda **o: LmdbAdapter(),
    "rocksdict": lambda **o: RocksdictAdapter(),
    "art": lambda **o: ArtAdapter(),
}


def get_adapter(name: str, **options) -> Adapter:
    """A fresh adapter for peer ``name`` (``options`` go to ``learnedidx.open`` for the learned index)."""
    try:
        factory = PEERS[name]
    except KeyError:
        raise learnedidx.errors.WorkloadError(f"unknown peer {name!r}; known: {sorted(PEERS)}") from None
    return factory(**options)


def available_peers() -> tuple[list[str], dict[str, str]]:
    """(names that work here, {name: why skipped})."""
    ok, skipped = [], {}
    for name in PEERS:
        try:
            get_adapter(name).close()
            ok.append(name)
        except ImportError as exc:
            skipped[name] = str(exc)
    return ok, skipped
