#!/usr/bin/env bash
# GPU check: build localllm + a CUDA backend offline on an NVIDIA machine, then
# measure our daemon against llama.cpp's own llama-bench on one 1B model.
#
# Two modes:
#
#   bench/gpu_check.sh --prepare [DIR]          # here: online, CPU only, quick
#       Fills DIR (default: .gpu-check/ at the repo root) with what the offline
#       GPU machine needs:
#         DIR/llama-cpp-python-0.3.36-trimmed.tar.gz   the pinned sdist, trimmed
#             (same layout; both a pip-buildable sdist and the source tree that
#             `localllm backends build cuda --source` configures)
#         DIR/wheels/            cp312 manylinux / pure wheels of the runtime and
#                                build deps (numpy and other big ones excluded:
#                                the GPU image has them)
#         DIR/requirements.txt   what step 1 installs from DIR/wheels
#         DIR/prepare-info.json  versions, sizes and checks of this preparation
#       and checks them: sha256 of the sdist, a cmake configure (+ `ninja -n`)
#       of the trimmed tree in both roles, pip's view of it as an sdist, and an
#       offline resolve of requirements.txt from DIR/wheels for CPython 3.12.
#
#   bench/gpu_check.sh [--skip-build] [--load] [--sampling] [DIR]   # GPU machine, offline
#       1. venv (--system-site-packages) + deps from DIR/wheels; llama-cpp-python
#          (CPU core) built from the trimmed sdist, or installed from
#          DIR/prebuilt/ (bench/gpu_prebuild.sh); localllm itself (native shim,
#          built against that core: LOCALLLM_LLAMA_PREFIX)
#       2. localllm backends build cuda --source TARBALL --also llama-bench, or
#          the plugin and tools of DIR/prebuilt/cuda-tools.tar.xz;
#          backends list, doctor (a CUDA device must be seen)
#       3. the 1B Q4_K_M benchmark GGUF (bench/gen_models.py; runs during step 2)
#       4. localllm serve + create, then /api/generate: ~512-token prefill and
#          128-token decode, warm-up then median of N
#       5. /api/ps size_vram against nvidia-smi's measured use
#       6. llama-bench on the same GGUF (-ngl 99 -p 512 -n 128), ratios, summary
#       8. --load, with the prebuilt tools: bench/engine_bench.py and
#          bench/server_bench.py at -ngl 99 against llama-bench,
#          llama-batched-bench and llama-server (issue 15's figures on a GPU)
#       9. --load or --sampling: bench/sampling_bench.py at -ngl 99, sampling on
#          the host against sampling on the device (in the decode's graph): step
#          time and tokens/s at 1, 4 and 16 streams, greedy and Ollama's chain
#          (about a minute; GPU_CHECK_SAMPLING_S bounds it, default 150)
#       --sampling runs steps 0-3 and then only step 9: with --skip-build after a
#       full run, `bash bench/gpu_check.sh --skip-build --sampling` takes ~2 minutes
#       --skip-build reuses the venv, backend build and model of a previous run
#       on the same machine (same GPU_CHECK_WORK); after a run cut off during
#       step 2 (a time limit), it resumes the CUDA build where ninja stopped.
#
# Output: logs, per-step timings, ours.json, anchor.json and gpu_check.json (the
# result) go to $OUT when set (the device runner collects it), else to
# $GPU_CHECK_WORK/out.  Exit status: 0 all goals met, 3 ran to the end but a
# goal was missed, anything else: a step failed (its name is printed).
#
# Environment (all optional):
#   GPU_CHECK_WORK        scratch folder (default /tmp/localllm-gpu-check): venv,
#                         LOCALLLM_HOME, LOCALLLM_CACHE (plugin build tree), bench
#                         models; kept for --skip-build
#   GPU_CHECK_JOBS        build parallelism (default: nproc)
#   GPU_CHECK_REPS        measured repetitions, ours and llama-bench (default 3)
#   GPU_CHECK_PORT        daemon port (default: a free one)
#   GPU_CHECK_CORE_CMAKE_ARGS  CMAKE_ARGS for the llama-cpp-python core
#   LOCALLLM_SDIST_CACHE  --prepare: where the sdist is cached
#                         (default ~/.cache/localllm/sdist)
set -Eeuo pipefail

LCP_VERSION="0.3.36"
SDIST_NAME="llama_cpp_python-${LCP_VERSION}.tar.gz"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST_TOP="llama_cpp_python-${LCP_VERSION}"
TARBALL_NAME="llama-cpp-python-${LCP_VERSION}-trimmed.tar.gz"
TARBALL_MAX_BYTES=$((20 * 1000 * 1000))
PREPARED_MAX_BYTES=$((50 * 1000 * 1000))
MODEL_NAME="gpucheck"

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MEASURE="$REPO/bench/gpu_check_measure.py"

# Backend-plugin configure flags, CUDA off (no nvcc here): what
# `localllm backends build cuda --also ...` passes (localllm/backends/build.py,
# read from there when it imports; this copy is the fallback).
BACKEND_CMAKE_FLAGS=(
    -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF
    -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=OFF -DGGML_CPU=ON -DGGML_RPC=ON
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF
)
# The llama-cpp-python core: CPU only, with libmtmd (the native shim links it
# for images).
CORE_CMAKE_ARGS="${GPU_CHECK_CORE_CMAKE_ARGS:--DGGML_CUDA=OFF}"

# ---------------------------------------------------------------------------
# Helpers: steps, timings, failures
# ---------------------------------------------------------------------------
STEP="start"
STEP_T0=$SECONDS
LOGS=""
TIMINGS=""
DAEMON_PID=""
GEN_PID=""
RUN_PID=""
# Step 8 (--load) state, global so that cleanup can still run it after a failed step.
UNDER_LOAD=0
STEP8_RAN=0
VENV_READY=0
CUDA_SEEN=0
TOOLS_DIR=""
TOOLS_XZ=""

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }

die() {
    printf '\ngpu_check: FAILED in step "%s": %s\n' "$STEP" "$*" >&2
    [[ -n "$LOGS" ]] && printf 'gpu_check: logs in %s\n' "$LOGS" >&2
    exit 1
}

on_err() {
    local rc=$? line=$1 cmd=$2
    trap - ERR
    printf '\ngpu_check: FAILED in step "%s" (exit %s at line %s: %s)\n' \
        "$STEP" "$rc" "$line" "$cmd" >&2
    [[ -n "$LOGS" ]] && printf 'gpu_check: logs in %s\n' "$LOGS" >&2
    exit "$rc"
}
trap 'on_err "$LINENO" "$BASH_COMMAND"' ERR
# Killed from outside (a time limit): still run the EXIT cleanup.
trap 'echo "gpu_check: interrupted in step \"$STEP\"" >&2; exit 130' INT
trap 'echo "gpu_check: terminated in step \"$STEP\"" >&2; exit 143' TERM

step() {
    STEP="$1"
    STEP_T0=$SECONDS
    printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$STEP"
}

step_done() {
    local dt=$((SECONDS - STEP_T0))
    log "    done: $STEP (${dt}s)"
    if [[ -n "$TIMINGS" ]]; then printf '%s\t%s\n' "$STEP" "$dt" >> "$TIMINGS"; fi
}

step_skipped() {
    log "    skipped: $STEP ($1)"
    if [[ -n "$TIMINGS" ]]; then printf '%s\t%s\n' "$STEP" "skipped" >> "$TIMINGS"; fi
}

# run_logged LOGFILE CMD...: run CMD with its output in LOGFILE; a heartbeat
# every 30s; on failure the log's tail and the step's name.
run_logged() {
    local logfile=$1; shift
    log "    \$ $*"
    log "    (log: $logfile)"
    "$@" > "$logfile" 2>&1 &
    local pid=$! t0=$SECONDS
    RUN_PID=$pid
    while kill -0 "$pid" 2>/dev/null; do
        for _ in $(seq 1 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "    ... $((SECONDS - t0))s: $(tail -n 1 "$logfile" 2>/dev/null | cut -c1-150)"
        fi
    done
    local rc=0
    wait "$pid" || rc=$?
    RUN_PID=""
    if [[ $rc -ne 0 ]]; then
        echo "----- last 40 lines of $logfile -----" >&2
        tail -n 40 "$logfile" >&2 || true
        echo "-----" >&2
        die "command exited with status $rc: $*"
    fi
}

file_size() { stat -c %s "$1"; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }

usage() {
    sed -n '2,/^set -/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

# ---------------------------------------------------------------------------
# --prepare (online, no GPU)
# ---------------------------------------------------------------------------

# Paths under $SDIST_TOP that neither build needs.  CMake never references
# them with the flags either build uses: tests/examples/tools' web UI sources
# only with LLAMA_BUILD_TESTS / LLAMA_BUILD_SERVER + LLAMA_BUILD_UI, the ggml
# backends only when their GGML_<NAME> option is ON (ggml_add_backend).
# examples/ and pocs/ stay (small; configured when LLAMA_BUILD_EXAMPLES is left ON).
TRIM_PATHS=(
    .git .github docs examples tests docker mkdocs.yml .readthedocs.yaml
    vendor/llama.cpp/models
    vendor/llama.cpp/docs
    vendor/llama.cpp/media
    vendor/llama.cpp/benches
    vendor/llama.cpp/tests
    vendor/llama.cpp/gguf-py
    vendor/llama.cpp/conversion
    vendor/llama.cpp/requirements
    vendor/llama.cpp/requirements.txt
    vendor/llama.cpp/skills
    vendor/llama.cpp/ci
    vendor/llama.cpp/.github
    vendor/llama.cpp/.devops
    vendor/llama.cpp/tools/ui/src
    vendor/llama.cpp/tools/ui/tests
    vendor/llama.cpp/tools/ui/static
    vendor/llama.cpp/tools/ui/package-lock.json
    vendor/llama.cpp/tools/server/tests
    vendor/llama.cpp/tools/server/bench
    vendor/llama.cpp/ggml/src/ggml-cann
    vendor/llama.cpp/ggml/src/ggml-et
    vendor/llama.cpp/ggml/src/ggml-hexagon
    vendor/llama.cpp/ggml/src/ggml-metal
    vendor/llama.cpp/ggml/src/ggml-opencl
    vendor/llama.cpp/ggml/src/ggml-openvino
    vendor/llama.cpp/ggml/src/ggml-sycl
    vendor/llama.cpp/ggml/src/ggml-virtgpu
    vendor/llama.cpp/ggml/src/ggml-webgpu
    vendor/llama.cpp/ggml/src/ggml-zdnn
    vendor/llama.cpp/ggml/src/ggml-zendnn
)
TRIM_GLOBS=(vendor/llama.cpp/convert_*.py)

get_sdist() {
    local cache=$1
    mkdir -p "$cache"
    local f="$cache/$SDIST_NAME"
    if [[ ! -f "$f" ]]; then
        if [[ -f "/tmp/sd/$SDIST_NAME" ]]; then
            log "    copying /tmp/sd/$SDIST_NAME into $cache"
            cp "/tmp/sd/$SDIST_NAME" "$f.tmp" && mv "$f.tmp" "$f"
        else
            run_logged "$LOGS/pip-download-sdist.log" python3 -m pip download --no-deps \
                --no-binary :all: "llama-cpp-python==${LCP_VERSION}" -d "$cache"
        fi
    fi
    local got
    got=$(sha256sum "$f" | cut -d' ' -f1)
    if [[ "$got" != "$SDIST_SHA256" ]]; then
        die "sha256 mismatch for $f: got $got, want $SDIST_SHA256 (delete it and rerun)"
    fi
    log "    sdist ok: $f (sha256 $SDIST_SHA256)"
}

# A minimal git for vendor/llama.cpp: HEAD, shallow and the one commit object,
# so llama.cpp's CMake finds the same commit (and build number 1, not dirty) as
# with the full sdist, without its 37 MB pack.  The sdist has a gitlink there
# into the top-level .git/modules/; the trimmed copy has the repository itself
# in vendor/llama.cpp/.git/, because `localllm backends build` unpacks only
# vendor/llama.cpp and should see the same commit as the pip-built core.
minimal_git() {
    local full=$1 trimmed=$2
    local src=".git/modules/vendor/llama.cpp"
    local sub="vendor/llama.cpp/.git"
    local sha
    sha=$(tr -d '\n' < "$full/$src/HEAD")
    [[ "$sha" =~ ^[0-9a-f]{40}$ ]] || die "unexpected $src/HEAD in the sdist: $sha"
    [[ -f "$trimmed/$sub" ]] || die "$sub (gitlink) missing in the sdist"
    rm -f "$trimmed/$sub"
    mkdir -p "$trimmed/$sub/objects/${sha:0:2}" "$trimmed/$sub/refs/heads" "$trimmed/$sub/refs/tags"
    git --git-dir="$full/$src" cat-file commit "$sha" | python3 -c '
import hashlib, sys, zlib
body = sys.stdin.buffer.read()
raw = b"commit %d\0" % len(body) + body
sha, out = sys.argv[1], sys.argv[2]
if hashlib.sha1(raw).hexdigest() != sha:
    sys.exit("commit object does not hash to HEAD")
open(out, "wb").write(zlib.compress(raw))
' "$sha" "$trimmed/$sub/objects/${sha:0:2}/${sha:2}"
    printf '%s\n' "$sha" > "$trimmed/$sub/HEAD"
    printf '%s\n' "$sha" > "$trimmed/$sub/shallow"
    printf '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n' \
        > "$trimmed/$sub/config"
    local got
    got=$(git -C "$trimmed/vendor/llama.cpp" rev-parse HEAD)
    [[ "$got" == "$sha" ]] || die "minimal git: rev-parse gives '$got', want $sha"
    log "    minimal git kept for vendor/llama.cpp: commit ${sha:0:7}," \
        "count $(git -C "$trimmed/vendor/llama.cpp" rev-list --count HEAD)"
}

make_tarball() {
    local sdist=$1 out=$2 work=$3
    rm -rf "$work/full" "$work/trim"
    mkdir -p "$work/full" "$work/trim"
    tar -xzf "$sdist" -C "$work/full"
    tar -xzf "$sdist" -C "$work/trim"
    local root="$work/trim/$SDIST_TOP"
    [[ -f "$root/pyproject.toml" && -f "$root/CMakeLists.txt" && -d "$root/vendor/llama.cpp" ]] \
        || die "unexpected sdist layout in $sdist"
    local p
    for p in "${TRIM_PATHS[@]}"; do rm -rf "${root:?}/$p"; done
    # shellcheck disable=SC2086  # the globs must expand
    (cd "$root" && for p in "${TRIM_GLOBS[@]}"; do rm -f $p; done)
    minimal_git "$work/full/$SDIST_TOP" "$root"
    # Reproducible: sorted names, fixed owner and mtime, no gzip timestamp.
    local mtime
    mtime=$(stat -c %Y "$work/full/$SDIST_TOP/PKG-INFO")
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
        --format=gnu -C "$work/trim" -cf - "$SDIST_TOP" | gzip -9 -n > "$out.tmp"
    mv "$out.tmp" "$out"
    log "    $(basename "$out"): $(mb "$(file_size "$out")")" \
        "(sdist: $(mb "$(file_size "$sdist")"); unpacked $(du -sh "$root" | cut -f1))"
    (( $(file_size "$out") < TARBALL_MAX_BYTES )) || die "trimmed tarball is over 20 MB"
}

# Configure-only checks of the trimmed tree (no compile: `ninja -n` proves every
# source file of the targets exists without building anything).
verify_tarball() {
    local tarball=$1 work=$2
    rm -rf "$work/check"
    mkdir -p "$work/check"
    tar -xzf "$tarball" -C "$work/check"
    local root="$work/check/$SDIST_TOP"
    local full="$work/full/$SDIST_TOP"

    # What the CUDA/HIP/MUSA backends glob must be untouched (no nvcc here to
    # configure GGML_CUDA=ON).
    local d
    for d in ggml-cuda ggml-hip ggml-musa ggml-cpu ggml-rpc ggml-blas ggml-vulkan; do
        diff -r -q "$full/vendor/llama.cpp/ggml/src/$d" "$root/vendor/llama.cpp/ggml/src/$d" \
            > /dev/null || die "ggml/src/$d differs from the sdist"
    done

    local gen=(-G Ninja)
    command -v ninja > /dev/null || die "ninja is needed for the configure checks"

    # Role 2: what `localllm backends build cuda --source TARBALL --also llama-bench`
    # does: unpack vendor/llama.cpp alone (its own unpack(), when it imports) and
    # configure it with its flags, CUDA off; then `ninja -n` of the tool targets.
    log "    unpack + configure vendor/llama.cpp as localllm backends build does (CUDA off)"
    local bsrc="$work/check/backend-src"
    local -a bflags=("${BACKEND_CMAKE_FLAGS[@]}")
    local got_flags
    if got_flags=$(PYTHONPATH="$REPO" python3 - "$tarball" "$bsrc" 2> "$LOGS/backend-unpack.log" <<'EOF'
import sys
from pathlib import Path
from localllm.backends import build, catalog, source
source.unpack(Path(sys.argv[1]), Path(sys.argv[2]))
flags = build.base_flags(catalog.get("cuda"), True)
print(" ".join("-DGGML_CUDA=OFF" if f == "-DGGML_CUDA=ON" else f for f in flags))
EOF
    ); then
        read -r -a bflags <<< "$got_flags"
        log "    (unpacked and flags from localllm.backends)"
    else
        log "    (localllm.backends not importable here: tar + the flags in this script)"
        rm -rf "$bsrc" "$work/check/x"
        mkdir -p "$work/check/x"
        tar -xzf "$tarball" -C "$work/check/x" "$SDIST_TOP/vendor/llama.cpp"
        mv "$work/check/x/$SDIST_TOP/vendor/llama.cpp" "$bsrc"
    fi
    run_logged "$LOGS/configure-backend.log" nice -n 10 cmake -S "$bsrc" \
        -B "$work/check/b-backend" "${bflags[@]}"
    grep -q "ggml commit:  ${COMMIT_SHORT}$" "$LOGS/configure-backend.log" \
        || die "configure did not see llama.cpp commit $COMMIT_SHORT (see configure-backend.log)"
    run_logged "$LOGS/ninja-n-backend.log" ninja -C "$work/check/b-backend" -n \
        llama-bench llama ggml ggml-base ggml-cpu llama-quantize llama-batched-bench

    # Role 1: the sdist pip builds (scikit-build-core runs this CMakeLists with
    # CMAKE_ARGS); ninja -n over `all` = everything the wheel compiles.
    log "    configure llama-cpp-python top (sdist role, core CMAKE_ARGS + defaults)"
    local -a core_args
    read -r -a core_args <<< "$CORE_CMAKE_ARGS"
    run_logged "$LOGS/configure-core.log" nice -n 10 cmake -S "$root" -B "$work/check/b-core" \
        "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSKBUILD_PLATLIB_DIR="$work/check/platlib" \
        "${core_args[@]}"
    run_logged "$LOGS/ninja-n-core.log" ninja -C "$work/check/b-core" -n all
    log "    configure llama-cpp-python top (sdist role, plain defaults incl. mtmd)"
    run_logged "$LOGS/configure-core-default.log" nice -n 10 cmake -S "$root" \
        -B "$work/check/b-core-default" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DSKBUILD_PLATLIB_DIR="$work/check/platlib"
    run_logged "$LOGS/ninja-n-core-default.log" ninja -C "$work/check/b-core-default" -n all

    # pip's view of the tarball as an sdist: metadata through scikit-build-core
    # (prepare_metadata_for_build_wheel; no compile), in a throwaway venv.
    log "    pip: the tarball as an sdist (metadata, no compile)"
    python3 -m venv "$work/check/venv"
    # A current pip: pip 23 checks Requires-Python against the running 3.11 even
    # with --python-version 3.12 (verify_wheels uses this venv too).
    run_logged "$LOGS/pip-skbuild.log" "$work/check/venv/bin/python" -m pip install -q -U \
        pip "scikit-build-core[pyproject]>=0.9.2"
    run_logged "$LOGS/pip-sdist-metadata.log" "$work/check/venv/bin/python" -m pip install \
        --dry-run --no-deps --no-build-isolation --ignore-installed \
        --report "$work/check/sdist-report.json" "$tarball"
    python3 - "$work/check/sdist-report.json" "$LCP_VERSION" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
meta = rep["install"][0]["metadata"]
name, ver = meta["name"].replace("_", "-").lower(), meta["version"]
assert (name, ver) == ("llama-cpp-python", sys.argv[2]), (name, ver)
print(f"           pip sees {meta['name']} {ver}, requires {meta.get('requires_dist')}")
EOF

    # pip wheel as on the GPU machine, through scikit-build-core's configure and
    # build, but building one tiny target (build-info.cpp): the install into the
    # wheel then fails on the libraries it did not build, which is expected.
    log "    pip wheel: configure + one-file build through scikit-build-core"
    local wl="$LOGS/pip-wheel-configure.log"
    if env CMAKE_ARGS="$CORE_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 10 \
        "$work/check/venv/bin/python" -m pip wheel -v --no-deps --no-build-isolation \
        -C build.targets=llama-common-base -w "$work/check/wheel" "$tarball" > "$wl" 2>&1; then
        log "    (pip wheel unexpectedly succeeded)"
    fi
    grep -q "Build files have been written" "$wl" || die "pip wheel: cmake configure failed (see $wl)"
    grep -q "ggml commit:  ${COMMIT_SHORT}$" "$wl" || die "pip wheel: llama.cpp commit not seen (see $wl)"
    grep -q "Installing project into wheel" "$wl" || die "pip wheel: the build step failed (see $wl)"
    log "    ok: pip -> scikit-build-core configured the trimmed sdist and built a target"
}

# What step 1 installs: localllm's [project] dependencies and build requires
# (minus cmake and ninja, and llama-cpp-python, built from the tarball) plus llama-cpp-python's own
# runtime and build requirements (read from the sdist).
write_requirements() {
    local out=$1 sdist_root=$2
    python3 - "$REPO/pyproject.toml" "$sdist_root/pyproject.toml" > "$out" <<'EOF'
import re, sys, tomllib
ours = tomllib.load(open(sys.argv[1], "rb"))
lcp = tomllib.load(open(sys.argv[2], "rb"))
reqs = [*ours["project"]["dependencies"], *ours["build-system"]["requires"],
        *lcp["project"]["dependencies"], *lcp["build-system"]["requires"]]
seen, out = set(), []
for r in reqs:
    name = re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-")
    # cmake and ninja: the GPU machine's own (step 0 checks them); localllm's build
    # needs neither there, built against llama-cpp-python's core (step 1).
    if name in ("llama-cpp-python", "cmake", "ninja"):
        continue
    key = r.replace(" ", "")
    if key not in seen:
        seen.add(key)
        out.append(r)
print("# generated by bench/gpu_check.sh --prepare; installed from wheels/ offline")
print("\n".join(out))
EOF
}

# Wheels the GPU image lacks. pip resolves the whole closure for CPython 3.12 on
# manylinux x86_64; the big packages the image already has are then dropped.
WHEEL_EXCLUDE_RE='^(numpy|torch|triton|nvidia_|scipy|sympy|networkx|mpmath)[-_]'
# Resolved, then dropped after the check: huggingface_hub imports without it and
# the offline machine downloads nothing from the Hub (4 MB of the carry).
WHEEL_DROP_AFTER_RE='^hf_xet[-_]'
PLATFORM_ARGS=(--python-version 3.12 --implementation cp --abi cp312
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux_2_28_x86_64 --only-binary :all:)

download_wheels() {
    local dir=$1 reqs=$2
    mkdir -p "$dir/wheels"
    run_logged "$LOGS/pip-download-wheels.log" python3 -m pip download \
        "${PLATFORM_ARGS[@]}" -d "$dir/wheels" -r "$reqs"
    local f n=0
    for f in "$dir"/wheels/*; do
        if [[ "$(basename "$f")" =~ $WHEEL_EXCLUDE_RE ]]; then
            rm -f "$f"
            n=$((n + 1))
        fi
    done
    log "    $(find "$dir/wheels" -name '*.whl' | wc -l) wheels," \
        "$(mb "$(du -sb "$dir/wheels" | cut -f1)") ($n big ones the image has dropped)"
}

# Offline resolve of requirements.txt from wheels/ for CPython 3.12 / manylinux,
# with a numpy wheel on the side standing in for the image's numpy; no pip
# configuration of this machine (find-links, extra indexes) takes part.
verify_wheels() {
    local dir=$1 work=$2 cache=$3
    local sim
    sim="$(dirname "$cache")/gpu-check-stand-ins"
    mkdir -p "$sim"
    if ! ls "$sim"/numpy-*.whl > /dev/null 2>&1; then
        run_logged "$LOGS/pip-download-numpy.log" python3 -m pip download --no-deps \
            "${PLATFORM_ARGS[@]}" -d "$sim" "numpy>=1.26,<3"
    fi
    run_logged "$LOGS/pip-resolve-offline.log" env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL \
        -u PIP_INDEX_URL -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null \
        "$work/check/venv/bin/python" -m pip install --dry-run \
        --ignore-installed --no-index --find-links "$dir/wheels" --find-links "$sim" \
        "${PLATFORM_ARGS[@]}" --target "$work/resolve-target" \
        --report "$work/resolve-report.json" -r "$dir/requirements.txt"
    python3 - "$work/resolve-report.json" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
names = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in rep["install"])
print(f"           resolves offline to {len(names)} packages:")
print("           " + " ".join(names))
EOF
}

prepare() {
    local dir=$1
    local cache="${LOCALLLM_SDIST_CACHE:-$HOME/.cache/localllm/sdist}"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    local work
    work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-prepare.XXXXXX")
    LOGS="$work/logs"
    mkdir -p "$LOGS"
    log "gpu_check --prepare: DIR=$dir (scratch: $work)"
    command -v git > /dev/null || die "git is needed (to read the sdist's commit)"

    step "sdist"
    get_sdist "$cache"
    step_done

    step "trim"
    make_tarball "$cache/$SDIST_NAME" "$dir/$TARBALL_NAME" "$work"
    COMMIT_SHORT=$(git -C "$work/trim/$SDIST_TOP/vendor/llama.cpp" rev-parse --short HEAD)
    step_done

    step "verify tarball (cmake configure + ninja -n, pip metadata)"
    verify_tarball "$dir/$TARBALL_NAME" "$work"
    step_done

    step "wheels"
    rm -rf "$dir/wheels"
    write_requirements "$dir/requirements.txt" "$work/full/$SDIST_TOP"
    sed 's/^/           /' "$dir/requirements.txt"
    download_wheels "$dir" "$dir/requirements.txt"
    step_done

    step "verify wheels (offline resolve for cp312)"
    verify_wheels "$dir" "$work" "$cache"
    local f
    for f in "$dir"/wheels/*; do
        if [[ "$(basename "$f")" =~ $WHEEL_DROP_AFTER_RE ]]; then rm -f "$f"; fi
    done
    step_done

    step "summary"
    local tb wh total
    tb=$(file_size "$dir/$TARBALL_NAME")
    wh=$(du -sb "$dir/wheels" | cut -f1)
    total=$((tb + wh))
    python3 - "$dir" "$tb" "$wh" "$COMMIT_SHORT" "$REPO" <<'EOF'
import hashlib, json, os, subprocess, sys, time
d, tb, wh, commit, repo = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
def rev():
    try:
        return subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:
        return ""
files = {}
for root, _, names in os.walk(d):
    for n in sorted(names):
        p = os.path.join(root, n)
        if n == "prepare-info.json":
            continue
        files[os.path.relpath(p, d)] = {"bytes": os.path.getsize(p),
                                        "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
json.dump({"prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "repo_commit": rev(), "llama_cpp_commit": commit,
           "tarball_bytes": tb, "wheels_bytes": wh, "files": files},
          open(os.path.join(d, "prepare-info.json"), "w"), indent=1)
EOF
    log "    tarball: $(mb "$tb"); wheels: $(mb "$wh"); total $(mb "$total")"
    (( total < PREPARED_MAX_BYTES )) || die "tarball + wheels is over 50 MB"
    rm -rf "$dir/prepare-logs"
    cp -r "$LOGS" "$dir/prepare-logs"
    rm -rf "$work"
    step_done
    cat <<EOF

Prepared $dir for the offline GPU machine:
  $(basename "$dir")/$TARBALL_NAME   $(mb "$tb")
  $(basename "$dir")/wheels/                                $(mb "$wh")
  total                                                 $(mb "$total")
On the GPU machine (carry $(basename "$dir") if it is git-ignored):
  bash bench/gpu_check.sh $(basename "$dir")
EOF
}

# ---------------------------------------------------------------------------
# GPU run (offline)
# ---------------------------------------------------------------------------
stop_daemon() {
    if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        log "    stopping the daemon (pid $DAEMON_PID)"
        kill -TERM "$DAEMON_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$DAEMON_PID" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$DAEMON_PID" 2>/dev/null; then
            log "    daemon still up after 10s: SIGKILL to its process group"
            kill -KILL -- "-$DAEMON_PID" 2>/dev/null || kill -KILL "$DAEMON_PID" 2>/dev/null || true
        fi
        # Its runners are in its process group (setsid); none may outlive it.
        kill -KILL -- "-$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
    fi
    DAEMON_PID=""
}

cleanup() {
    local rc=$?
    trap - ERR  # with errtrace, a failing command here would report a second failure
    stop_daemon
    local p
    for p in "$RUN_PID" "$GEN_PID"; do
        if [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; then
            kill -TERM "$p" 2>/dev/null || true
            wait "$p" 2>/dev/null || true
        fi
    done
    if [[ $rc -ne 0 && $rc -ne 3 && -n "$TIMINGS" ]]; then
        # A result file even for a failed run, naming the step.
        printf '{"ok": false, "failed_step": "%s", "exit_status": %s, "logs": "%s"}\n' \
            "$STEP" "$rc" "$LOGS" > "$LOGS/gpu_check.json" || true
        # The engine's own figures need neither the daemon nor llama-bench's step:
        # a failure there still leaves a GPU run something to measure.
        if [[ $UNDER_LOAD == 1 && $STEP8_RAN == 0 && $VENV_READY == 1 && $CUDA_SEEN == 1 ]]; then
            log "    step \"$STEP\" failed; running step 8 anyway"
            (under_load_step) || true
        fi
    fi
    return "$rc"
}

# A venv over the image's packages.  Without ensurepip (Debian/Ubuntu's python3
# lacking python3-venv) the venv is made --without-pip and runs the image's pip,
# which then installs into the venv (it follows the running interpreter).  When
# the image's python3 is itself a venv (the GPU image's /opt/torch/.venv), its
# packages (numpy, pip) are not the base interpreter's "system" site: a .pth
# file adds them after the venv's own.
make_venv() {
    local venv=$1
    if ! python3 -m venv --system-site-packages "$venv" > "$LOGS/step1-venv.log" 2>&1; then
        log "    python3 -m venv failed (no ensurepip?): retrying --without-pip"
        rm -rf "$venv"
        python3 -m venv --system-site-packages --without-pip "$venv" >> "$LOGS/step1-venv.log" 2>&1 \
            || { cat "$LOGS/step1-venv.log" >&2; die "cannot create a venv with python3"; }
    fi
    local purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
    local image_site venv_site
    image_site=$(python3 -c "$purelib")
    venv_site=$("$venv/bin/python" -c "$purelib")
    if [[ "$image_site" != "$venv_site" ]] && ! "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
        printf '%s\n' "$image_site" > "$venv_site/zz-image-site.pth"
        log "    the image's packages ($image_site) added to the venv's path"
    fi
    "$venv/bin/python" -m pip --version > /dev/null 2>&1 \
        || die "the venv has no pip and the image's python3 has no pip module either"
    "$venv/bin/python" -c 'import numpy' 2>/dev/null \
        || die "numpy is importable neither in the venv nor in the image's python3"
}

# The plugin links the CUDA runtime and cuBLAS by soname. An image may have them
# only inside a Python package (PyTorch's nvidia-* wheels) or in a toolkit folder
# the loader does not search: add the folder of each one ldd cannot find.
find_cuda_libs() {
    local so=$1 lib hit
    local -a dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib
                   /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu)
    dirs+=("$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia")
    for lib in $(ldd "$so" 2>/dev/null | awk '/not found/ {print $1}'); do
        hit=$(find "${dirs[@]}" -name "$lib" -print -quit 2>/dev/null || true)
        if [[ -n "$hit" ]]; then
            export LD_LIBRARY_PATH="$(dirname "$hit")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            log "    $lib: $hit"
        else
            log "    $lib: not found (the plugin will not load)"
        fi
    done
}

gpu_run() {
    local dir=$1 skip_build=$2 under_load=$3 sampling_only=${4:-0}
    dir="$(cd "$dir" && pwd)"
    local tarball="$dir/$TARBALL_NAME"
    WORK="${GPU_CHECK_WORK:-/tmp/localllm-gpu-check}"
    LOGS="${OUT:-$WORK/out}"
    mkdir -p "$WORK" "$LOGS"
    LOGS="$(cd "$LOGS" && pwd)"
    TIMINGS="$LOGS/timings.tsv"
    : > "$TIMINGS"
    trap cleanup EXIT
    local jobs="${GPU_CHECK_JOBS:-$(nproc)}"
    local reps="${GPU_CHECK_REPS:-3}"
    local venv="$WORK/venv"
    PY="$venv/bin/python"
    local ll="$venv/bin/localllm"
    # Everything localllm writes stays in WORK: home (models, plugins, logs) and
    # cache (the unpacked source and the cmake build tree of the plugin).
    export LOCALLLM_HOME="$WORK/home" LOCALLLM_CACHE="$WORK/cache"
    # Named, so that the benchmarks' own daemons (other homes) find the plugin too.
    export LOCALLLM_BACKENDS="$WORK/home/backends"
    export LOCALLLM_BENCH_CACHE="${LOCALLLM_BENCH_CACHE:-$WORK/bench-cache}"
    export HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
    local model="$LOCALLLM_BENCH_CACHE/models/llama-1b-q4_k_m.gguf"
    local t_all=$SECONDS

    step "0 preflight"
    log "    repo $REPO, DIR $dir, work $WORK, logs $LOGS, jobs $jobs, reps $reps"
    # bench/gpu_prebuild.sh's output, when there, replaces both compiles.
    local pre="$dir/prebuilt" core_whl="" tools_xz=""
    core_whl=$(ls "$pre"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
    [[ -f "$pre/cuda-tools.tar.xz" ]] && tools_xz="$pre/cuda-tools.tar.xz"
    TOOLS_XZ=$tools_xz
    TOOLS_DIR="$WORK/cuda-tools"
    UNDER_LOAD=$under_load
    log "    prebuilt core: ${core_whl:-none}; prebuilt CUDA tools: ${tools_xz:-none}"
    if [[ -z "$core_whl" || -z "$tools_xz" ]]; then
        [[ -f "$tarball" ]] || die "$tarball is missing: run 'bash bench/gpu_check.sh --prepare' first"
    fi
    [[ -d "$dir/wheels" && -f "$dir/requirements.txt" ]] \
        || die "$dir/wheels or requirements.txt is missing: run --prepare again"
    command -v nvidia-smi > /dev/null || die "nvidia-smi not found: this mode needs an NVIDIA GPU"
    if ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
        export PATH="/usr/local/cuda/bin:$PATH"
    fi
    command -v nvcc > /dev/null || die "nvcc not found (PATH or /usr/local/cuda/bin)"
    for t in python3 cmake ninja; do
        command -v "$t" > /dev/null || die "$t not found"
    done
    {
        echo "# nvidia-smi"; nvidia-smi
        echo "# gpus"; nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total,memory.used --format=csv
        echo "# nvcc"; nvcc --version
        echo "# python3"; python3 --version
        echo "# cmake"; cmake --version
        echo "# ninja"; ninja --version
        echo "# nproc"; nproc
        echo "# prepare-info"; cat "$dir/prepare-info.json" 2>/dev/null || true
    } > "$LOGS/preflight.log" 2>&1
    nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv,noheader \
        | sed 's/^/    gpu: /'
    log "    $(nvcc --version | tail -n 2 | head -n 1)"
    log "    $(python3 --version), cmake $(cmake --version | head -n 1 | awk '{print $3}'), ninja $(ninja --version)"
    step_done

    if [[ "$skip_build" == 1 ]]; then
        step "1 venv + deps + llama-cpp-python + localllm"
        [[ -f "$venv/.gpu-check-ok" && -x "$ll" ]] \
            || die "--skip-build: no complete venv at $venv (run once without --skip-build)"
        step_skipped "--skip-build: reusing $venv"
        VENV_READY=1
    else
        step "1 venv + deps + llama-cpp-python + localllm"
        rm -rf "$venv" "$LOCALLLM_HOME" "$LOCALLLM_CACHE"
        make_venv "$venv"
        # The closure was resolved at --prepare (verify_wheels): installed as it is,
        # no resolver here, so a wheel the machine never needs may be left out
        # (hf_xet, for Hub downloads).
        run_logged "$LOGS/step1-deps.log" "$PY" -m pip install --no-index --no-deps \
            "$dir"/wheels/*.whl
        if [[ -n "$core_whl" ]]; then
            run_logged "$LOGS/step1-llama-cpp-python.log" "$PY" -m pip install --no-index \
                --no-deps "$core_whl"
        else
            log "    building llama-cpp-python (CMAKE_ARGS=$CORE_CMAKE_ARGS)"
            run_logged "$LOGS/step1-llama-cpp-python.log" env CMAKE_ARGS="$CORE_CMAKE_ARGS" \
                CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "$PY" -m pip install -v --no-index \
                --no-build-isolation --find-links "$dir/wheels" "$tarball"
        fi
        # localllm's own install compiles its core from the pinned sdist, which it fetches
        # with pip (there is no index here, and the trimmed tarball is not that file): it
        # is built against the llama-cpp-python core just installed instead, as a prefix
        # (LOCALLLM_LLAMA_PREFIX, native/README.md). At run time the binding finds that
        # core again through llama_cpp's lib/, which the module's rpath names too.
        local prefix="$WORK/llama-prefix"
        rm -rf "$prefix"
        "$PY" - "$prefix" <<'EOF'
import importlib.util, sys, sysconfig
from pathlib import Path
spec = importlib.util.find_spec("llama_cpp")
pkg = Path(next(iter(spec.submodule_search_locations))).resolve()
data = Path(sysconfig.get_paths()["data"])
include = next(d for d in (pkg.parent / "include", data / "include", pkg / "include")
               if (d / "llama.h").is_file())
out = Path(sys.argv[1])
out.mkdir(parents=True)
(out / "include").symlink_to(include)
(out / "lib").symlink_to(pkg / "lib")
print(f"    llama-cpp-python's core as a prefix: {include}, {pkg / 'lib'}")
EOF
        run_logged "$LOGS/step1-localllm.log" env LOCALLLM_LLAMA_PREFIX="$prefix" \
            "$PY" -m pip install -v --no-index --no-build-isolation --no-deps "$REPO"
        (cd "$WORK" && "$PY" -c 'import localllm._native, llama_cpp, sys; print("    localllm native ok; llama_cpp", llama_cpp.__version__, "in", sys.prefix)') \
            || die "localllm._native does not import (see step1-localllm.log)"
        "$PY" -m pip list > "$LOGS/step1-pip-list.txt" 2>&1 || true
        "$PY" -m pip check > "$LOGS/step1-pip-check.txt" 2>&1 \
            || log "    note: pip check reports conflicts (see step1-pip-check.txt)"
        touch "$venv/.gpu-check-ok"
        VENV_READY=1
        step_done
    fi

    # The model only needs the native module: generate it while CUDA compiles.
    if [[ -f "$model" ]]; then
        log "    model already there: $model"
    else
        log "    generating the 1B model in the background (log: $LOGS/step3-gen-models.log)"
        (cd "$WORK" && exec nice -n 5 "$PY" "$REPO/bench/gen_models.py" --model 1b \
            --quant q4_k_m --threads "$jobs") > "$LOGS/step3-gen-models.log" 2>&1 &
        GEN_PID=$!
    fi

    step "2 CUDA backend build (+ llama-bench)"
    local tools_dir=$TOOLS_DIR
    if [[ -n "$tools_xz" ]]; then
        rm -rf "$tools_dir"
        tar -xJf "$tools_xz" -C "$WORK"
        local ver
        ver=$(cat "$tools_dir/GGML_VERSION")
        mkdir -p "$LOCALLLM_BACKENDS/$ver"
        cp "$tools_dir/libggml-cuda.so" "$LOCALLLM_BACKENDS/$ver/libggml-cuda.so"
        find_cuda_libs "$tools_dir/libggml-cuda.so"
        step_skipped "prebuilt: the plugin (ggml $ver) and llama.cpp's tools from $tools_xz"
    # --skip-build reuses a finished build; an unfinished one (a run cut off by a
    # time limit) is resumed: the cmake tree in LOCALLLM_CACHE is kept.
    elif [[ "$skip_build" == 1 ]] && "$ll" backends list --json > "$LOGS/step2-before.json" 2>&1 \
        && "$PY" "$MEASURE" find-bench --backends "$LOGS/step2-before.json" > /dev/null 2>&1 \
        && "$PY" -c 'import json,sys; sys.exit(not any(b.get("name") == "cuda" and b.get("built") for b in json.load(open(sys.argv[1]))))' "$LOGS/step2-before.json"; then
        step_skipped "--skip-build: the CUDA plugin and llama-bench are built"
    else
        run_logged "$LOGS/step2-backends-build.log" "$ll" backends build cuda \
            --source "$tarball" --jobs "$jobs" --also llama-bench
        step_done
    fi

    step "2b backends list + doctor"
    "$ll" backends list 2>&1 | tee "$LOGS/step2-backends-list.txt" | sed 's/^/    /' \
        || die "'localllm backends list' failed"
    "$ll" backends list --json > "$LOGS/step2-backends-list.json" 2> "$LOGS/step2-backends-list.err" \
        || die "'localllm backends list --json' failed: $(tail -n 5 "$LOGS/step2-backends-list.err")"
    local bench_bin
    if [[ -n "$tools_xz" ]]; then
        bench_bin="$tools_dir/llama-bench"
    else
        bench_bin=$("$PY" "$MEASURE" find-bench --backends "$LOGS/step2-backends-list.json" \
            --search "$LOCALLLM_CACHE" --search "$LOCALLLM_HOME") || die "no llama-bench from the CUDA backend build (see step2-backends-list.json)"
    fi
    log "    llama-bench: $bench_bin"
    "$ll" doctor 2>&1 | tee "$LOGS/step2-doctor.txt" | sed 's/^/    /' || true
    "$ll" doctor --json > "$LOGS/step2-doctor.json" 2> "$LOGS/step2-doctor.err" \
        || die "'localllm doctor --json' failed (native module not loadable?)"
    "$PY" "$MEASURE" check-doctor "$LOGS/step2-doctor.json" \
        || die "localllm doctor shows no CUDA device: the backend is not loaded"
    CUDA_SEEN=1
    step_done

    step "3 1B Q4_K_M model"
    if [[ -n "$GEN_PID" ]]; then
        local rc=0
        wait "$GEN_PID" || rc=$?
        GEN_PID=""
        if [[ $rc -ne 0 ]]; then
            tail -n 30 "$LOGS/step3-gen-models.log" >&2 || true
            die "bench/gen_models.py exited with status $rc"
        fi
    fi
    [[ -f "$model" ]] || die "$model was not written (see step3-gen-models.log)"
    log "    $model ($(mb "$(file_size "$model")"))"
    step_done
    if [[ "$sampling_only" == 1 ]]; then
        sampling_step
        exit 0
    fi

    step "4 serve + create + measure"
    local port="${GPU_CHECK_PORT:-$("$PY" "$MEASURE" free-port)}"
    export LOCALLLM_HOST="127.0.0.1:$port"
    export LOCALLLM_NUM_PARALLEL=1 LOCALLLM_KEEP_ALIVE=30m LOCALLLM_SHUTDOWN_GRACE=5s
    (cd "$WORK" && exec setsid "$ll" serve) > "$LOGS/step4-daemon.log" 2>&1 &
    DAEMON_PID=$!
    log "    daemon pid $DAEMON_PID on $LOCALLLM_HOST (log: $LOGS/step4-daemon.log)"
    "$PY" "$MEASURE" wait-health --url "http://$LOCALLLM_HOST" --pid "$DAEMON_PID" --timeout 90 \
        || { tail -n 30 "$LOGS/step4-daemon.log" >&2; die "the daemon did not come up"; }
    printf 'FROM %s\n' "$model" > "$WORK/Modelfile"
    run_logged "$LOGS/step4-create.log" "$ll" create "$MODEL_NAME" -f "$WORK/Modelfile"
    "$PY" "$MEASURE" measure --url "http://$LOCALLLM_HOST" --model "$MODEL_NAME" \
        --gguf "$model" --reps "$reps" --daemon-pid "$DAEMON_PID" --out "$LOGS/ours.json" \
        2>&1 | tee "$LOGS/step4-measure.log" || die "measurement failed (see step4-measure.log)"
    step_done

    step "5 stop daemon"
    "$ll" ps > "$LOGS/step5-ps.txt" 2>&1 || true
    stop_daemon
    step_done

    step "6 llama-bench"
    "$PY" "$MEASURE" anchor --bench "$bench_bin" --model "$model" --reps "$reps" \
        --logs "$LOGS" --out "$LOGS/anchor.json" || die "llama-bench failed (see $LOGS/llama-bench*.log)"
    step_done

    step "7 summary"
    printf 'total\t%s\n' "$((SECONDS - t_all))" >> "$TIMINGS"
    local rc=0
    "$PY" "$MEASURE" summary --ours "$LOGS/ours.json" --anchor "$LOGS/anchor.json" \
        --timings "$TIMINGS" --preflight "$LOGS/preflight.log" --gguf "$model" \
        --out "$LOGS/gpu_check.json" --text "$LOGS/summary.txt" || rc=$?
    if [[ $rc -ne 0 && $rc -ne 3 ]]; then die "summary failed"; fi
    log "    result: $LOGS/gpu_check.json"
    if [[ "$under_load" == 1 ]]; then
        under_load_step
        sampling_step
    fi
    exit "$rc"
}

# Step 9 (--load, or alone with --sampling): host sampling against device sampling
# in-process on the 1B model, all layers on the GPU (bench/sampling_bench.py; the
# daemon of step 4 already samples on the device: its output layer is on the GPU).
sampling_step() {
    step "9 sampling on the host vs on the device, -ngl 99"
    # The bench imports localllm from the checkout: give it step 1's native module.
    local native
    native=$(cd "$WORK" && "$PY" -c 'import localllm._native as m; print(m.__file__)')
    cp "$native" "$REPO/localllm/"
    local t0=$SECONDS
    (cd "$REPO" && timeout "${GPU_CHECK_SAMPLING_S:-150}" "$PY" bench/sampling_bench.py \
        --model 1b-q4_k_m --ngl 99 --parallel 1,4,16 --rounds 3 --tokens 64) \
        > "$LOGS/step9-sampling-bench.log" 2>&1 || log "    sampling_bench failed or timed out"
    log "    sampling_bench: $((SECONDS - t0))s"
    sed -n '/^model /,$p' "$LOGS/step9-sampling-bench.log" | sed 's/^/    /'
    step_done
}

# Step 8 (--load): issue 15's benchmarks on the GPU, against llama.cpp's CUDA
# tools from the prebuilt tarball (llama-server is built only there). Its result
# is in its logs; a failure here is reported and leaves steps 1-7's result alone.
under_load_step() {
    local tools_dir=$TOOLS_DIR tools_xz=$TOOLS_XZ
    STEP8_RAN=1
    step "8 under load: engine_bench and server_bench, -ngl 99"
    if [[ -z "$tools_xz" || ! -x "$tools_dir/llama-server" ]]; then
        step_skipped "needs bench/gpu_prebuild.sh's llama-server"
        return 0
    fi
    # The bench scripts import localllm from the checkout: give it the native
    # module built at step 1 (it finds libllama through the installed core).
    local native
    native=$(cd "$WORK" && "$PY" -c 'import localllm._native as m; print(m.__file__)')
    cp "$native" "$REPO/localllm/"
    mkdir -p "$LOCALLLM_BENCH_CACHE/llama-tools"
    ln -sfn "$tools_dir" "$LOCALLLM_BENCH_CACHE/llama-tools/bin"
    local t0=$SECONDS
    (cd "$REPO" && timeout "${GPU_CHECK_ENGINE_S:-150}" "$PY" bench/engine_bench.py \
        --model 1b-q4_k_m --ngl 99 --rounds 2 --parallel 1,4,16 --runner-shape) \
        > "$LOGS/step8-engine-bench.log" 2>&1 || log "    engine_bench failed or timed out"
    log "    engine_bench: $((SECONDS - t0))s"
    sed -n '/^model /,$p' "$LOGS/step8-engine-bench.log" | sed 's/^/    /'
    t0=$SECONDS
    (cd "$REPO" && timeout "${GPU_CHECK_SERVER_S:-240}" "$PY" bench/server_bench.py \
        --model 1b-q4_k_m --ngl 99 --rounds 1 --per-user 2 --output-tokens 64 \
        --levels 1,4,16 --threads 4) \
        > "$LOGS/step8-server-bench.log" 2>&1 || log "    server_bench failed or timed out"
    log "    server_bench: $((SECONDS - t0))s"
    sed -n '/^model /,$p' "$LOGS/step8-server-bench.log" | sed 's/^/    /'
    step_done
}

# ---------------------------------------------------------------------------
main() {
    local mode=run skip_build=0 under_load=0 sampling_only=0 dir=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --prepare) mode=prepare ;;
            --skip-build) skip_build=1 ;;
            --load) under_load=1 ;;
            --sampling) sampling_only=1 ;;
            -h|--help) usage; exit 0 ;;
            -*) echo "gpu_check: unknown option $1 (see --help)" >&2; exit 2 ;;
            *) [[ -z "$dir" ]] || { echo "gpu_check: one DIR only" >&2; exit 2; }
               dir=$1 ;;
        esac
        shift
    done
    dir="${dir:-$REPO/.gpu-check}"
    if [[ $mode == prepare ]]; then
        [[ $skip_build == 0 ]] || { echo "gpu_check: --skip-build is for the GPU run" >&2; exit 2; }
        prepare "$dir"
    else
        [[ -d "$dir" ]] || { echo "gpu_check: $dir does not exist (run --prepare first)" >&2; exit 2; }
        # Not in an `||` list: that would switch off errexit and the ERR trap inside.
        gpu_run "$dir" "$skip_build" "$under_load" "$sampling_only"
    fi
}

main "$@"
