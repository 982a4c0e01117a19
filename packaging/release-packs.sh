#!/usr/bin/env bash
# Build the CUDA plugin packs a release publishes, one per GPU architecture, and
# write the trusted.toml lines that let `localllm backends get cuda` accept them.
#
#   packaging/release-packs.sh [--arch "75 80 ..."] [--out DIR] [--jobs N]
#                              [--source SDIST] [--cuda VERSION] [--dry-run]
#
# Each architecture is built with the command a user runs, `localllm backends
# build cuda --arch A --yes`: NVIDIA's compiler and libraries come from the
# package index (the wheel toolkit, about 530 MB, downloaded once into
# localllm's cache) unless an nvcc is on PATH.  Then `localllm backends pack
# cuda` writes the pack: the plugin alone, its manifest naming NVIDIA's runtime
# wheels (cuBLAS, the CUDA runtime) that `backends install` fetches once into the
# cache.  A pack holds machine code for exactly one architecture ("90" is built
# as 90-real), so a user downloads only what their GPU runs.
#
# Default architectures: the Turing-to-Blackwell set Ollama's CUDA 13 build
# targets on Linux (75 80 86 87 89 90 90a 100 103 110 120 121), one pack each,
# keeping those this machine's processor family has GPUs for: on x86-64 the
# Jetson (87, 110) and DGX Spark (121) ones are dropped, on aarch64 they are
# kept; 90a is left out, since the 90 pack serves the same GPUs (sm_90a
# only adds instructions ggml does not use).
#
# Everything goes to DIR (default ~/.cache/localllm-release/): packs/ (the
# files to upload to the LOCALLLM_BACKENDS_REPO repo), logs/ (each build's and
# pack's output), trusted-lines.toml (the lines for localllm/backends/trusted.toml)
# and summary.tsv (per architecture: wall seconds, CPU seconds (user+sys of
# every compiler process), plugin and pack bytes).  The plugins are built into
# DIR/backends (LOCALLLM_BACKENDS), never over the user's own.
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PY" ]] || PY="$(command -v python3)"
OUT="${RELEASE_PACKS_OUT:-$HOME/.cache/localllm-release}"
JOBS="$(nproc)"
SOURCE=""
CUDA=""
DRY=0
case "$(uname -m)" in
    x86_64 | amd64) ARCHS="75 80 86 89 90 100 103 120" ;;
    aarch64 | arm64) ARCHS="87 90 100 103 110 120 121" ;;
    *) ARCHS="" ;;
esac

while [[ $# -gt 0 ]]; do
    case "$1" in
        --arch) ARCHS="${2//,/ }"; shift ;;
        --out) OUT="$2"; shift ;;
        --jobs) JOBS="$2"; shift ;;
        --source) SOURCE="$2"; shift ;;
        --cuda) CUDA="$2"; shift ;;
        --dry-run) DRY=1 ;;
        -h | --help) sed -n '2,/^set -/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "release-packs: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[[ -n "$ARCHS" ]] || { echo "release-packs: no architectures for $(uname -m); pass --arch" >&2; exit 2; }

say() { printf '%s release-packs: %s\n' "$(date +%H:%M:%S)" "$*"; }
export LOCALLLM_BACKENDS="$OUT/backends"
build_args=(--yes --jobs "$JOBS")
[[ -n "$SOURCE" ]] && build_args+=(--source "$SOURCE")
[[ -n "$CUDA" ]] && build_args+=(--cuda "$CUDA")

if [[ $DRY == 1 ]]; then
    for arch in $ARCHS; do
        echo "LOCALLLM_BACKENDS=$LOCALLLM_BACKENDS $PY -m localllm backends build cuda --arch $arch ${build_args[*]}"
        echo "LOCALLLM_BACKENDS=$LOCALLLM_BACKENDS $PY -m localllm backends pack cuda -o $OUT/packs/"
    done
    exit 0
fi

mkdir -p "$OUT/packs" "$OUT/logs" "$LOCALLLM_BACKENDS"
LOG_DIR="$("$PY" -c 'from localllm import paths; print(paths.logs())')"
printf 'arch\twall_s\tcpu_s\tplugin_bytes\tpack_bytes\tpack\n' > "$OUT/summary.tsv"
: > "$OUT/trusted-lines.toml"
TIMEFORMAT='%R %U %S'

for arch in $ARCHS; do
    say "sm_$arch: building (log: $OUT/logs/build-sm$arch.log)"
    rc=0
    # `time` counts every child the build waited for: cmake, ninja, nvcc, cicc, ptxas.
    { time "$PY" -m localllm backends build cuda --arch "$arch" "${build_args[@]}" \
        > "$OUT/logs/build-sm$arch.log" 2>&1; } 2> "$OUT/logs/time-sm$arch.txt" || rc=$?
    read -r wall user sys < "$OUT/logs/time-sm$arch.txt"
    cp "$LOG_DIR/backend-build-cuda.log" "$OUT/logs/backend-build-sm$arch.log" 2>/dev/null || true
    # The build names what it built ("Built cuda for ggml V in S s: PATH (SIZE)"); the
    # file's own time is no sign, since it is copied with the build folder's mtime (an
    # incremental build of an unchanged plugin installs an old file).  A machine without
    # the NVIDIA driver cannot load the plugin and the build still exits 0 there ("no
    # CUDA device"): no such line is a failed build.
    plugin=$(sed -n 's/^Built cuda for ggml .* in .* s: \(.*libggml-cuda\.so\) (.*$/\1/p' \
        "$OUT/logs/build-sm$arch.log" | tail -n 1)
    if [[ -z "$plugin" || ! -f "$plugin" ]]; then
        tail -n 20 "$OUT/logs/build-sm$arch.log" >&2
        say "sm_$arch: FAILED (exit $rc); see $OUT/logs/build-sm$arch.log"
        exit 1
    fi
    before=$(ls "$OUT/packs")
    "$PY" -m localllm backends pack cuda -o "$OUT/packs/" > "$OUT/logs/pack-sm$arch.log" 2>&1 \
        || { cat "$OUT/logs/pack-sm$arch.log" >&2; say "sm_$arch: packing failed"; exit 1; }
    name=$(sed -n 's/^Packed .*: \(.*\.tar\.gz\) (.*$/\1/p' "$OUT/logs/pack-sm$arch.log")
    sha=$(sed -n 's/^sha256 \([0-9a-f]\{64\}\)$/\1/p' "$OUT/logs/pack-sm$arch.log")
    [[ -f "$name" && -n "$sha" ]] || { say "sm_$arch: cannot read the pack's name or sha256"; exit 1; }
    [[ "$(sha256sum "$name" | cut -d' ' -f1)" == "$sha" ]] || { say "sm_$arch: sha256 differs"; exit 1; }
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.0f", u + s }')
    printf '%s\t%.0f\t%s\t%s\t%s\t%s\n' "$arch" "$wall" "$cpu" "$(stat -c %s "$plugin")" \
        "$(stat -c %s "$name")" "$(basename "$name")" >> "$OUT/summary.tsv"
    printf '    { file = "%s", sha256 = "%s" },\n' "$(basename "$name")" "$sha" \
        >> "$OUT/trusted-lines.toml"
    say "sm_$arch: ${wall%.*} s wall, $cpu s CPU, pack $(stat -c %s "$name") bytes" \
        "(new: $(comm -13 <(echo "$before") <(ls "$OUT/packs") | tr '\n' ' '))"
done

say "done; per architecture:"
column -t -s $'\t' "$OUT/summary.tsv"
say "lines for localllm/backends/trusted.toml ($OUT/trusted-lines.toml):"
cat "$OUT/trusted-lines.toml"
say "upload $OUT/packs/* under these names to the LOCALLLM_BACKENDS_REPO repo"
