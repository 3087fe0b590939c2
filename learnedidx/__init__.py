"""learnedidx: a string-key learned-index KV store, in-database ML UDFs for
PostgreSQL, and an emulated-FPGA accelerator server they both offload to.

>>> import learnedidx
>>> with learnedidx.open() as db:
...     db.put(b"user1", b"v1")
...     db.get(b"user1")
b'v1'
"""
from __future__ import annotations

from learnedidx import errors, jitcache

jitcache.configure()  # before any kernel module is imported

__version__ = "0.1.0"


def open(path=None, **options):  # noqa: A001 - mirrors builtins.open / dbm.open
    """Open a store: in memory when ``path`` is None, else durable at ``path``.

    The options are the fields of :class:`learnedidx.index.options.StoreOptions`
    (docs/store.md); invalid ones raise :class:`~learnedidx.errors.ConfigError`.
    """
    from learnedidx.index.store import Store

    return Store(path, **options)


__all__ = ["open", "errors", "__version__"]
