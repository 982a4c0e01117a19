#!/usr/bin/env bash
# Install a built wheel the way users do (pipx, a fresh venv) and prove it compiles
# nothing, then run a model with it (packaging/smoke.py: a daemon from that install
# serves a tiny generated model, and the TUI shows its reply).
#
#   packaging/wheels/check.sh dist/localllm-…-manylinux_….whl
#
# "Compiles nothing", three ways: pip may take only wheels (--only-binary :all:, so an
# sdist anywhere in the dependency tree fails the install); cc, gcc, c++, g++, cmake and
# ninja on PATH are traps that record their call and fail; and the install's time is
# printed (a core build is minutes).  The trap log must stay empty.
set -euo pipefail
WHEEL="$(realpath "$1")"
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/traps"
for tool in cc gcc c++ g++ clang cmake ninja x86_64-linux-gnu-gcc; do
  printf '#!/bin/sh\necho "%s $*" >> "%s/trap.log"\nexit 97\n' "$tool" "$WORK" > "$WORK/traps/$tool"
  chmod +x "$WORK/traps/$tool"
done
touch "$WORK/trap.log"
if "$PY" -m pipx --version >/dev/null 2>&1; then
  PIPX=("$PY" -m pipx)
else
  "$PY" -m venv "$WORK/pipx-venv"
  "$WORK/pipx-venv/bin/python" -m pip install -q pipx
  PIPX=("$WORK/pipx-venv/bin/python" -m pipx)
fi
export PIPX_HOME="$WORK/home" PIPX_BIN_DIR="$WORK/bin" PIPX_MAN_DIR="$WORK/man"
# An empty localllm cache: a cached core must not be what makes the install quick.
export LOCALLLM_CACHE="$WORK/cache" CC="$WORK/traps/cc" CXX="$WORK/traps/c++"
started=$("$PY" -c "import time; print(time.time())")
PATH="$WORK/traps:$PATH" "${PIPX[@]}" install --pip-args="--only-binary=:all:" "$WHEEL"
seconds=$("$PY" -c "import sys, time; print(time.time() - float(sys.argv[1]))" "$started")
if [ -s "$WORK/trap.log" ]; then
  echo "check.sh: the install called a compiler:" >&2
  cat "$WORK/trap.log" >&2
  exit 1
fi
printf 'pipx install: %.1f s, no compiler called, only wheels\n' "$seconds"
PIPX_PY="$PIPX_HOME/venvs/localllm/bin/python"
cd /tmp
"$PIPX_BIN_DIR/localllm" doctor --json | "$PIPX_PY" -c '
import json, sys
r = json.load(sys.stdin)
assert r["native"]["ok"], r["native"]
print("doctor: native module ok, ggml", r["ggml_version"])'
"$PIPX_PY" -c 'from localllm.engine import binding; print("system info:", binding.system_info())'
# Plugins load into this install's core (those in LOCALLLM_BACKENDS, if any are built).
"$PIPX_BIN_DIR/localllm" backends list --json | "$PIPX_PY" -c '
import json, sys
rows = json.load(sys.stdin)
built = [r for r in rows if r.get("built")]
assert all(r["loaded"] for r in built), built
print("backends: built and loaded:", ", ".join(r["name"] for r in built) or "none built")'
"$PIPX_PY" "$HERE/../smoke.py"
