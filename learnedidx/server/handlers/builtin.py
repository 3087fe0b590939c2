"""Built-in operations: ``health`` and ``stats``."""
from __future__ import annotations

import os
import time

from learnedidx.server.protocol import VERSION
from learnedidx.server.registry import handler, operations


@handler("health")
def health(args, arrays, ctx):
    """Liveness, whether the start hooks have run (warm), pid, protocol version, the device (backend, widest job) and the operations offered."""
    from learnedidx import __version__

    return {"status": "ok", "warm": ctx.server.warm.is_set(), "pid": os.getpid(), "version": __version__, "protocol": VERSION,
            "backend": ctx.server.device.name,
            "max_features": ctx.server.device.max_features, "operations": operations(),
            "missing_handler_modules": ctx.server.failed_modules}, {}


@handler("stats")
def stats(args, arrays, ctx):
    """Request counts, device jobs, queue length, busy time and modelled cycles."""
    s = ctx.server
    with s._stats_lock:
        out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in s.stats.items()}
    out["uptime_s"] = time.time() - s.started
    out["device"] = s.device.stats()
    return out, {}
