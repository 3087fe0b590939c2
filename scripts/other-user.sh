#!/usr/bin/env bash
# Another OS user for the tests that need one (tests/other_user.py), prepared as root so that
# the suite, run as an unprivileged user, needs no sudo:
#   other-user.sh up DIR    creates the system user learnedidx-other (once) and, in DIR (made
#                           here, owned by root, mode 0755), as that user: open/ (mode 0777),
#                           private/ (mode 0700) and shared/ (mode 0755) with a process listening
#                           on shared/accel.sock (mode 0777) that greets like a learnedidx server
#                           and appends to shared/received the bytes each connection sent it;
#   other-user.sh down DIR  stops that process and removes DIR.
# scripts/test.sh runs both around the suite and passes DIR as $LEARNEDIDX_TEST_OTHER_USER_DIR.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OTHER=learnedidx-other
cmd=$1 DIR=$2

LISTENER='
import os, socket, sys
from learnedidx.server import protocol as P

path, log = sys.argv[1:3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o777)
s.listen(16)
while True:
    conn, _ = s.accept()
    n = 0
    with conn:
        try:
            P.write_frame(conn, P.HELLO)
            conn.settimeout(60)
            while chunk := conn.recv(1 << 16):
                n += len(chunk)
        except OSError:
            pass
    with open(log, "a") as f:
        f.write(f"{n}\n")
'

case $cmd in
up)
    id "$OTHER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$OTHER"
    install -d -o root -g root -m 0755 "$DIR"
    install -d -o "$OTHER" -m 0777 "$DIR/open"
    install -d -o "$OTHER" -m 0700 "$DIR/private"
    install -d -o "$OTHER" -m 0755 "$DIR/shared"
    install -o "$OTHER" -m 0644 /dev/null "$DIR/shared/received"
    # (NUMBA_CACHE_DIR: importing learnedidx leaves no directory of that user's outside DIR)
    runuser -u "$OTHER" -- env NUMBA_CACHE_DIR="$DIR/shared/numba" "$REPO/.venv/bin/python" -P -c "$LISTENER" \
        "$DIR/shared/accel.sock" "$DIR/shared/received" </dev/null >"$DIR/listener.log" 2>&1 &
    echo $! >"$DIR/listener.pid"  # runuser's pid (DIR is root's): it passes SIGTERM on to the listener
    for _ in $(seq 300); do [ -S "$DIR/shared/accel.sock" ] && exit 0; sleep 0.1; done
    echo "other-user.sh: the listener did not start:" >&2
    cat "$DIR/listener.log" >&2
    exit 1
    ;;
down)
    if [ -f "$DIR/listener.pid" ]; then kill "$(cat "$DIR/listener.pid")" 2>/dev/null || true; fi
    rm -rf "$DIR"
    ;;
*)
    echo "usage: $0 up|down DIR" >&2
    exit 2
    ;;
esac
