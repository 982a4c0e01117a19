#!/usr/bin/env bash
# Build llama.cpp's own tools (llama-bench, llama-server, llama-batched-bench,
# llama-quantize, llama-lookup) as benchmark anchors, from the llama.cpp sources vendored in
# the same llama-cpp-python sdist our engine's wheel was built from, so that
# "ours vs theirs" compares one llama.cpp version.
#
# Usage:  bench/build_llama_tools.sh            # build once; later runs skip
#         LOCALLLM_BENCH_CACHE=/some/dir bench/build_llama_tools.sh
#         LLAMA_TOOLS_JOBS=8 bench/build_llama_tools.sh   # on a bigger machine
#
# Output: $CACHE/llama-tools/bin/{llama-bench,llama-server,llama-batched-bench,llama-quantize,
#         llama-lookup}
# Everything lives outside the repo; never commit these binaries.
set -euo pipefail

LCP_VERSION="0.3.36"
CACHE="${LOCALLLM_BENCH_CACHE:-$HOME/.cache/localllm-bench}"
JOBS="${LLAMA_TOOLS_JOBS:-2}"
SDIST_NAME="llama_cpp_python-${LCP_VERSION}.tar.gz"
SRC_ROOT="$CACHE/src/llama_cpp_python-${LCP_VERSION}"
BUILD="$CACHE/llama-tools/build"
BIN="$CACHE/llama-tools/bin"
TARGETS=(llama-bench llama-server llama-batched-bench llama-quantize llama-lookup)

mkdir -p "$CACHE/src" "$BIN"

all_built=1
for t in "${TARGETS[@]}"; do
    [[ -x "$BIN/$t" ]] || all_built=0
done
if [[ $all_built == 1 ]]; then
    echo "llama tools already built in $BIN"
    exit 0
fi

# The sdist: reuse a cached copy, else a known local copy, else pip (no binary,
# so we get the sources rather than a wheel).
if [[ ! -f "$CACHE/src/$SDIST_NAME" ]]; then
    if [[ -f "/tmp/lcp/$SDIST_NAME" ]]; then
        cp "/tmp/lcp/$SDIST_NAME" "$CACHE/src/"
    else
        PY="${PYTHON:-python3}"
        "$PY" -m pip download --no-deps --no-binary :all: \
            "llama-cpp-python==${LCP_VERSION}" -d "$CACHE/src"
    fi
fi
if [[ ! -d "$SRC_ROOT/vendor/llama.cpp" ]]; then
    tar -xzf "$CACHE/src/$SDIST_NAME" -C "$CACHE/src"
fi

# Same defaults as the wheel (native CPU backend, OpenMP); only what can't work
# offline is switched off.  Release, because the anchor must be llama.cpp at its best.
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
nice -n 10 cmake -S "$SRC_ROOT/vendor/llama.cpp" -B "$BUILD" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF

nice -n 10 cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"

# Copy binaries plus the shared libraries they need next to each other; the
# build sets an rpath into $BUILD/bin, so keep the build folder too.
for t in "${TARGETS[@]}"; do
    cp -f "$BUILD/bin/$t" "$BIN/$t"
done
cp -f "$BUILD"/bin/*.so* "$BIN/" 2>/dev/null || true
echo "built: ${TARGETS[*]} in $BIN"
