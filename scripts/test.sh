#!/usr/bin/env bash
# Install what the tests need (PostgreSQL 15 server, PL/Python, pageinspect, word lists,
# a virtualenv with the package and its test extras, the extension files, and PGXS for the
# tests that run `make install` / `make installcheck` on the extension's files) and run them.
source "$(dirname "$0")/../docker/install.sh"
cd "$REPO"

export NUMBA_CACHE_DIR=/var/tmp/learnedidx-numba-cache
export PYTHONDONTWRITEBYTECODE=1
PYTEST=("$REPO/.venv/bin/python" -m pytest -p no:cacheprovider "$@")
if [ "$(id -u)" -eq 0 ]; then
    # PostgreSQL refuses to run as root: run the suite as an unprivileged user.
    id learnedidx-test >/dev/null 2>&1 || useradd --system --create-home --home-dir /var/lib/learnedidx-test learnedidx-test
    mkdir -p "$NUMBA_CACHE_DIR" && chown learnedidx-test "$NUMBA_CACHE_DIR"
    # Another OS user's directories and socket, for the tests that show the server and its
    # clients refuse them (tests/other_user.py).
    OTHER_DIR=$(mktemp -d /tmp/learnedidx-other.XXXXXX)
    trap 'bash "$REPO/scripts/other-user.sh" down "$OTHER_DIR"' EXIT
    bash "$REPO/scripts/other-user.sh" up "$OTHER_DIR"
    runuser -u learnedidx-test -- env HOME=/var/lib/learnedidx-test NUMBA_CACHE_DIR="$NUMBA_CACHE_DIR" \
        PYTHONDONTWRITEBYTECODE=1 PATH="$REPO/.venv/bin:$PATH" LEARNEDIDX_TEST_OTHER_USER_DIR="$OTHER_DIR" \
        "${PYTEST[@]}"
    exit
fi
mkdir -p "$NUMBA_CACHE_DIR"
exec env PATH="$REPO/.venv/bin:$PATH" "${PYTEST[@]}"
