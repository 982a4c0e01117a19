#!/usr/bin/env bash
# Time the first install as README.md gives it, from a clean clone of this checkout:
#   1. cold: a new venv, an empty pip cache and an empty localllm cache (so the core is
#      downloaded and compiled);
#   2. warm: the venv removed and made again, both caches kept (the core is copied);
#   3. pipx: `pipx install .` with the same warm caches.
# The caches are private folders under WORKDIR (PIP_CACHE_DIR, LOCALLLM_CACHE): nothing
# shared is deleted, and what the machine has cached does not help.  `uptime` is printed
# before and after each step: a figure only counts from a quiet machine.
#
#   bash bench/first_install.sh [WORKDIR]     # default /tmp/localllm-first-install
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
W="${1:-/tmp/localllm-first-install}"
rm -rf "$W"
mkdir -p "$W"
git clone -q "$REPO" "$W/repo"
export PIP_CACHE_DIR="$W/pip-cache" LOCALLLM_CACHE="$W/localllm-cache"
export PIPX_HOME="$W/pipx" PIPX_BIN_DIR="$W/bin" PIPX_MAN_DIR="$W/man"
cd "$W/repo"
echo "$(nproc) cores; $(python3 --version); $(git log -1 --format='%h %s')"

step() {
    local label=$1
    shift
    echo "== $label: $*"
    uptime
    local t0=$SECONDS
    if ! "$@" > "$W/$label.log" 2>&1; then
        echo "FAILED: see $W/$label.log"
        exit 1
    fi
    uptime
    echo "$label: $((SECONDS - t0)) s"
}

install='python3 -m venv .venv && .venv/bin/python -m pip install -e ".[test]"'
step cold sh -c "$install"
python3 - "$LOCALLLM_CACHE" <<'EOF'
import json, pathlib, sys
for m in pathlib.Path(sys.argv[1]).glob("core/*/core.json"):
    print(f"   of which the core's download and build: {json.loads(m.read_text())['build_seconds']} s")
EOF
rm -rf .venv
step warm sh -c "$install"
step pipx .venv/bin/pipx install .
"$W/bin/localllm" doctor | grep -E "^Native"
