"""Helpers shared by the benchmarks: timing and table output."""
from __future__ import annotations

import ctypes
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

# Wide tables stay readable when the output goes to a file or CI log (``COLUMNS`` still rules
# when set: the widest tables, bench offload's, want about 260 columns).
console = Console() if sys.stdout.isatty() or "COLUMNS" in os.environ else Console(width=260)


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls, in seconds (the first call is not special: warm up first)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def print_table(title: str, columns: list[str], rows: list[list]) -> None:
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(*[f"{x:,.3f}" if isinstance(x, float) else str(x) for x in r])
    console.print(t)


def parse_list(text: str, cast=int) -> list:
    return [cast(x) for x in text.split(",") if x.strip()]


def status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (0 where there is none)."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else 0


def reset_peak() -> bool:
    """Start the peak resident size (VmHWM) afresh; False where Linux does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def trim_heap() -> None:
    """Hand memory freed during the build back to the OS (glibc's allocator keeps some), so
    that the resident size after it is what the structure holds."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
