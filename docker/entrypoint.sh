#!/usr/bin/env bash
# Starts PostgreSQL 15 and the learnedidx accelerator server beside it (both as the postgres
# OS user, so the server reaches the cluster over the local socket with peer authentication),
# then runs the given command (default: wait on the server).
set -euo pipefail
PGDATA=${PGDATA:-/var/lib/postgresql/15/main}
SOCK=${LEARNEDIDX_SOCKET:-/run/learnedidx/accel.sock}
install -d -o postgres -g postgres -m 0700 "$(dirname "$SOCK")"
install -d -o postgres -g postgres /var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    install -d -o postgres -g postgres "$PGDATA"
    runuser -u postgres -- /usr/lib/postgresql/15/bin/initdb -D "$PGDATA" --auth-local=peer --auth-host=scram-sha-256
fi
runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$PGDATA" -l "$PGDATA/server.log" \
    -o "-c listen_addresses='*' -c learnedidx.socket=$SOCK" start
runuser -u postgres -- /repo/.venv/bin/learnedidx server start --socket "$SOCK" \
    --pg-conninfo "user=postgres" --daemon
if [ $# -gt 0 ]; then exec "$@"; fi
exec tail -F "$PGDATA/server.log"
