"""Entry point of the server process: ``python -m learnedidx.server.main [OPTIONS]`` runs
``learnedidx server start [OPTIONS]`` (the same options, declared once there)."""
from __future__ import annotations

import sys

from learnedidx.server.cli import app


def main(argv: list[str] | None = None) -> None:
    app(["start", *(sys.argv[1:] if argv is None else argv)], prog_name="python -m learnedidx.server.main")


if __name__ == "__main__":
    main()
