#!/usr/bin/env bash
# Install learnedidx and run the main job: a YCSB load + run on the embedded store.
source "$(dirname "$0")/setup.sh"
apt_install python3-venv python3-dev
make_venv ""
cd "$REPO"
exec .venv/bin/learnedidx ycsb run --workload A --records 200000 --operations 200000 "$@"
