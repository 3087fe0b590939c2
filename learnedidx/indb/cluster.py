"""A throwaway PostgreSQL cluster for benchmarks and demos (initdb + pg_ctl, Unix socket only)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from learnedidx.errors import InDBError

DEFAULT_BINDIR = os.environ.get("LEARNEDIDX_PG_BINDIR", "/usr/lib/postgresql/15/bin")


class TempCluster:
    """``with TempCluster() as c: psycopg.connect(c.conninfo)``: initdb, start, stop, delete.

    The server listens on a Unix socket in a private directory only (no TCP), trusts the
    local superuser ``postgres`` and is removed on exit.
    """

    def __init__(self, bindir: str = DEFAULT_BINDIR, settings: dict[str, str] | None = None,
                 keep: bool = False) -> None:
        if os.geteuid() == 0:
            raise InDBError("PostgreSQL refuses to run as root: run as an unprivileged user")
        self.bindir = Path(bindir)
        if not (self.bindir / "pg_ctl").exists():
            raise InDBError(f"no PostgreSQL server binaries in {bindir} (install postgresql-15)")
        self.settings = {"shared_buffers": "1GB", "max_wal_size": "4GB", "fsync": "off",
                         "synchronous_commit": "off", "listen_addresses": "''", **(settings or {})}
        self.keep = keep
        self.root: Path | None = None

    @property
    def socket_dir(self) -> str:
        return str(self.root / "sock")

    @property
    def conninfo(self) -> str:
        return f"host={self.socket_dir} port=5432 user=postgres dbname=postgres"

    def __enter__(self) -> "TempCluster":
        self.root = Path(tempfile.mkdtemp(prefix="learnedidx-pg-"))
        (self.root / "sock").mkdir(mode=0o700)
        data = self.root / "data"
        self._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        self._pg_ctl("start")
        return self

    def _pg_ctl(self, action: str) -> None:
        # -l: the postmaster must not inherit our pipes (we would wait for it to exit)
        opts = " ".join([f"-k {self.socket_dir}", "-p 5432"] + [f"-c {k}={v}" for k, v in self.settings.items()])
        self._run("pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "server.log"), "-m", "fast", "-w",
                  "-o", opts, action)

    def restart(self) -> None:
        """Restart the server (fast shutdown: sessions are terminated)."""
        self._pg_ctl("restart")

    def __exit__(self, *exc) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")
        finally:
            if not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, tool: str, *args: str) -> None:
        res = subprocess.run([str(self.bindir / tool), *args], capture_output=True, text=True)
        if res.returncode != 0:
            log = self.root / "server.log" if self.root else None
            tail = log.read_text()[-2000:] if log and log.exists() else ""
            raise InDBError(f"{tool} failed: {res.stderr.strip() or res.stdout.strip()}\n{tail}")
