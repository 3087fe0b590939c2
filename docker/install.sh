#!/usr/bin/env bash
# The image's install steps, also run by scripts/test.sh (and so by CI) on the bare machine:
# PostgreSQL 15 + PL/Python, the server's headers and a compiler (the extension's C module is
# built with PGXS), word lists, a virtualenv at .venv with the package and its test extras, and
# the extension built and installed into the server.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/setup.sh"
apt_install python3-venv python3-dev postgresql-15 postgresql-plpython3-15 postgresql-server-dev-15 make gcc \
    wamerican-insane zstd
make_venv "${LEARNEDIDX_EXTRAS-[test]}"
$SUDO "$REPO/.venv/bin/learnedidx" pg install --pgconfig /usr/lib/postgresql/15/bin/pg_config
