#!/usr/bin/env bash
# Starts PostgreSQL 15 and the learnedidx accelerator server beside it, both as the postgres OS
# user (the backends check that the server's socket belongs to their own OS user; the server
# never connects to PostgreSQL), then runs the given command (default: wait on the server).
set -euo pipefail
PGDATA=${PGDATA:-/var/lib/postgresql/15/main}
SOCK=${LEARNEDIDX_SOCKET:-/run/learnedidx/accel.sock}
install -d -o postgres -g postgres -m 0700 "$(dirname "$SOCK")"
install -d -o postgres -g postgres /var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    install -d -o postgres -g postgres "$PGDATA"
    # Clients connect over TCP with a password (POSTGRES_PASSWORD sets the postgres role's).
    runuser -u postgres -- /usr/lib/postgresql/15/bin/initdb -D "$PGDATA" --auth-local=peer --auth-host=scram-sha-256
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
fi
runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$PGDATA" -l "$PGDATA/server.log" \
    -o "-c listen_addresses='*' -c learnedidx.socket=$SOCK" start
if [ -n "${POSTGRES_PASSWORD:-}" ]; then
    runuser -u postgres -- psql -X -q -c "ALTER ROLE postgres PASSWORD '${POSTGRES_PASSWORD//\'/\'\'}'"
fi
runuser -u postgres -- /repo/.venv/bin/learnedidx server start --socket "$SOCK" --daemon
if [ $# -gt 0 ]; then exec "$@"; fi
exec tail -F "$PGDATA/server.log"
