# Shared set-up for scripts/quickstart.sh and scripts/test.sh (sourced, not run).
# Installs the Debian packages and a virtualenv at .venv with the package in it.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

apt_install() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "setup: installing Debian packages: ${missing[*]}"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

make_venv() {
    # Debian's python3 (readable by every user, unlike a per-user interpreter),
    # so tests can run as an unprivileged user when the caller is root.
    local extras="$1"
    if [ ! -x "$REPO/.venv/bin/python" ]; then
        /usr/bin/python3 -m venv "$REPO/.venv"
    fi
    "$REPO/.venv/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$REPO/.venv/bin/python" -m pip install -q -e "$REPO$extras"
}
