#!/usr/bin/env bash
# GPU check on the user's path: localllm's own core, the CUDA plugin from a pack
# built elsewhere (no nvcc on the GPU machine, the driver only), cuBLAS from the
# runtime wheels the pack names, measured against llama.cpp's own tools.
#
#   bash bench/gpu_check.sh [--dry-run] [DIR]        # DIR: default .gpu-check/
#
# DIR is what bench/gpu_prebuild.sh prepared on a machine with a package index
# (the GPU machine has none):
#   DIR/core/            localllm's core (include/, lib/, core.json), built by
#                        native/core_build.py: the install here compiles only the shim
#   DIR/pack/*.tar.gz    the CUDA pack (packaging/release-packs.sh) and pack.sha256
#   DIR/tools/           llama-bench and llama-server from the same pinned source,
#                        ggml as loadable backends: they load the pack's plugin too
#   DIR/wheels/          localllm's dependencies the GPU image lacks (cp312)
# cuBLAS and the CUDA runtime: the pack names NVIDIA's wheels, and `backends
# install --wheels` takes them from the image's Python environment, where the same
# wheels are installed (PyTorch's), checked file by file against the sha256s the
# pack names, into localllm's cache; no LD_LIBRARY_PATH for localllm.  (llama.cpp's
# tools get that cache folder on LD_LIBRARY_PATH: the same files.)
#
# Steps: 0 preflight; 1 venv, deps, localllm (LOCALLLM_LLAMA_PREFIX=DIR/core);
# 2 `localllm backends install` of the pack, timed, then doctor must see a CUDA
# device; 3 the 1B Q4_K_M model (generated during 1-2); 4 ROUNDS rounds, each
# ours (daemon, one stream: ~512-token prompt, 128 tokens) then llama-bench
# (pp512, tg128), VRAM as /api/ps says against nvidia-smi; 5 aggregates at 1, 4
# and 16 streams against llama-server (bench/server_bench.py, rounds alternating);
# 6 summary.  About 5 minutes on an H100; GPU_CHECK_BUDGET_S (default 480) stops
# step 5 short rather than the whole run.
#
# Output in $OUT (the device runner collects it) or $GPU_CHECK_WORK/out:
# gpu_check.json, summary.txt, timings.tsv, the logs.  Exit 0: goals met; 3: ran
# to the end, a goal missed; other: a step failed (named).
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MEASURE="$REPO/bench/gpu_check_measure.py"
MODEL_NAME="gpucheck"
STEP="start"
STEP_T0=$SECONDS
DAEMON_PID=""
GEN_PID=""
LOGS=""
TIMINGS=""

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }
die() {
    printf '\ngpu_check: FAILED in step "%s": %s\n' "$STEP" "$*" >&2
    [[ -n "$LOGS" ]] && printf 'gpu_check: logs in %s\n' "$LOGS" >&2
    exit 1
}
trap 'die "exit $? at line $LINENO: $BASH_COMMAND"' ERR
step() { STEP="$1"; STEP_T0=$SECONDS; printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$1"; }
step_done() {
    local dt=$((SECONDS - STEP_T0))
    log "    done: $STEP (${dt}s)"
    [[ -z "$TIMINGS" ]] || printf '%s\t%s\n' "$STEP" "$dt" >> "$TIMINGS"
}

stop_daemon() {
    [[ -n "$DAEMON_PID" ]] || return 0
    kill -TERM "$DAEMON_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$DAEMON_PID" 2>/dev/null || true  # its runners are in its group
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=""
}
cleanup() {
    local rc=$?
    trap - ERR
    stop_daemon
    [[ -z "$GEN_PID" ]] || kill "$GEN_PID" 2>/dev/null || true
    if [[ $rc -ne 0 && $rc -ne 3 && -n "$LOGS" ]]; then
        printf '{"ok": false, "failed_step": "%s", "exit_status": %s}\n' "$STEP" "$rc" \
            > "$LOGS/gpu_check.json" || true
    fi
    return "$rc"
}

# The image's Python environment (site-packages) that holds NVIDIA's runtime wheels.
image_site() {
    python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

# A venv over the image's packages.  The GPU image's python3 is itself a venv
# (/opt/torch/.venv), whose packages are not the base interpreter's "system" site:
# a .pth file adds them after the venv's own.  Without ensurepip the venv is made
# --without-pip and the image's pip (on that path) installs into it.
make_venv() {
    local venv=$1 site venv_site
    python3 -m venv --system-site-packages "$venv" > "$LOGS/step1-venv.log" 2>&1 || {
        rm -rf "$venv"
        python3 -m venv --system-site-packages --without-pip "$venv" >> "$LOGS/step1-venv.log" 2>&1 \
            || die "cannot create a venv with python3 (see step1-venv.log)"
    }
    site=$(image_site)
    venv_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [[ "$site" != "$venv_site" ]] && ! "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
        printf '%s\n' "$site" > "$venv_site/zz-image-site.pth"
    fi
    "$venv/bin/python" -m pip --version > /dev/null 2>&1 || die "the venv has no pip"
}

main() {
    local dry=0 dir=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --dry-run) dry=1 ;;
            -h | --help) sed -n '2,/^set -/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
            -*) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
            *) dir=$1 ;;
        esac
        shift
    done
    dir="$(cd "${dir:-$REPO/.gpu-check}" && pwd)" || exit 2
    local pack sha tools="$dir/tools"
    pack=$(ls "$dir"/pack/cuda-*.tar.gz 2>/dev/null | head -n 1 || true)
    sha=$(cat "$dir/pack/pack.sha256" 2>/dev/null || true)
    for need in "$dir/core/include/llama.h" "$dir/core/core.json" "$pack" "$tools/llama-bench" \
        "$tools/llama-server" "$dir/wheels"; do
        [[ -e "$need" ]] || { echo "gpu_check: $need missing: run bench/gpu_prebuild.sh" >&2; exit 2; }
    done
    [[ "$sha" =~ ^[0-9a-f]{64}$ ]] || { echo "gpu_check: no $dir/pack/pack.sha256" >&2; exit 2; }
    [[ "$(sha256sum "$pack" | cut -d' ' -f1)" == "$sha" ]] \
        || { echo "gpu_check: $pack does not have the sha256 in pack.sha256" >&2; exit 2; }
    if [[ $dry == 1 ]]; then
        echo "gpu_check: DIR $dir is complete: core ggml $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ggml_version"])' "$dir/core/core.json"),"
        echo "  pack $(basename "$pack") ($(stat -c %s "$pack") bytes, sha256 $sha),"
        echo "  tools $(ls "$tools" | tr '\n' ' '), $(ls "$dir"/wheels/*.whl | wc -l) wheels"
        echo "  carried with the checkout: $(du -sh "$dir" | cut -f1)"
        exit 0
    fi
    run "$dir" "$pack" "$sha" "$tools"
}

run() {
    local dir=$1 pack=$2 sha=$3 tools=$4
    local work="${GPU_CHECK_WORK:-/tmp/localllm-gpu-check}"
    local rounds="${GPU_CHECK_ROUNDS:-3}" budget="${GPU_CHECK_BUDGET_S:-480}"
    rm -rf "$work" && mkdir -p "$work"
    LOGS="${OUT:-$work/out}"
    mkdir -p "$LOGS"
    TIMINGS="$LOGS/timings.tsv"
    : > "$TIMINGS"
    trap cleanup EXIT
    export LOCALLLM_HOME="$work/home" LOCALLLM_CACHE="$work/cache"
    export LOCALLLM_BACKENDS="$work/home/backends" LOCALLLM_BENCH_CACHE="$work/bench-cache"
    export HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_INDEX=1
    local venv="$work/venv" model="$work/bench-cache/models/llama-1b-q4_k_m.gguf"
    PY="$venv/bin/python"
    local ll="$venv/bin/localllm" t_all=$SECONDS

    step "0 preflight"
    command -v nvidia-smi > /dev/null || die "no nvidia-smi: this needs an NVIDIA GPU"
    { nvidia-smi; nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total \
        --format=csv; python3 --version; nproc; } > "$LOGS/preflight.log" 2>&1
    nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | sed 's/^/    /'
    log "    nvcc on PATH: $(command -v nvcc || echo none) (not used)"
    step_done

    step "1 venv, deps, localllm on its own core"
    make_venv "$venv"
    "$PY" -m pip install -q --no-deps "$dir"/wheels/*.whl > "$LOGS/step1-deps.log" 2>&1 \
        || die "installing DIR/wheels failed (see step1-deps.log)"
    # The core localllm built on the prebuild machine, as a prefix: only the shim compiles.
    LOCALLLM_LLAMA_PREFIX="$dir/core" "$PY" -m pip install -q --no-build-isolation \
        --no-deps "$REPO" > "$LOGS/step1-localllm.log" 2>&1 \
        || die "installing localllm failed (see step1-localllm.log)"
    export LOCALLLM_LLAMA_PREFIX="$dir/core"
    (cd "$work" && "$PY" -c 'import localllm._native') || die "localllm._native does not import"
    (cd "$work" && exec nice -n 5 "$PY" "$REPO/bench/gen_models.py" --model 1b --quant q4_k_m \
        --threads "$(nproc)") > "$LOGS/step3-gen-models.log" 2>&1 &
    GEN_PID=$!
    step_done

    step "2 backends install (the pack, its runtime wheels from the image's environment)"
    local t0
    t0=$(date +%s.%N)
    "$ll" backends install "$pack" --trust "$sha" --wheels "$(image_site)" \
        > "$LOGS/step2-install.log" 2>&1 || { cat "$LOGS/step2-install.log"; die "install failed"; }
    local install_s
    install_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    sed 's/^/    /' "$LOGS/step2-install.log"
    log "    pack install: ${install_s}s (includes the proof that the plugin loads)"
    printf 'pack install s\t%s\n' "$install_s" >> "$TIMINGS"
    "$ll" doctor --json > "$LOGS/step2-doctor.json" 2> "$LOGS/step2-doctor.err" || true
    "$PY" "$MEASURE" check-doctor "$LOGS/step2-doctor.json" || die "doctor sees no CUDA device"
    "$ll" doctor 2>&1 | grep -i -E "cuda|runtime" | sed 's/^/    /' || true
    step_done

    step "3 model"
    wait "$GEN_PID" || die "bench/gen_models.py failed (see step3-gen-models.log)"
    GEN_PID=""
    [[ -f "$model" ]] || die "no $model"
    step_done

    step "4 one stream: ours and llama-bench, $rounds rounds"
    local port
    port=$("$PY" "$MEASURE" free-port)
    export LOCALLLM_HOST="127.0.0.1:$port" LOCALLLM_NUM_PARALLEL=1 LOCALLLM_KEEP_ALIVE=30m
    (cd "$work" && exec setsid "$ll" serve) > "$LOGS/step4-daemon.log" 2>&1 &
    DAEMON_PID=$!
    "$PY" "$MEASURE" wait-health --url "http://$LOCALLLM_HOST" --pid "$DAEMON_PID" --timeout 90 \
        || die "the daemon did not come up (see step4-daemon.log)"
    printf 'FROM %s\n' "$model" > "$work/Modelfile"
    "$ll" create "$MODEL_NAME" -f "$work/Modelfile" > "$LOGS/step4-create.log" 2>&1
    # llama.cpp's tools: the pack's plugin beside them, cuBLAS from localllm's cache.
    cp "$LOCALLLM_BACKENDS"/*/libggml-cuda.so "$tools/"
    local rt_path
    rt_path=$(find "$LOCALLLM_CACHE/cuda-runtime" -mindepth 1 -maxdepth 1 -type d | paste -sd:)
    local r
    for r in $(seq 1 "$rounds"); do
        log "    round $r: ours"
        "$PY" "$MEASURE" measure --url "http://$LOCALLLM_HOST" --model "$MODEL_NAME" \
            --gguf "$model" --reps 2 --daemon-pid "$DAEMON_PID" --out "$LOGS/ours-r$r.json" \
            > "$LOGS/step4-ours-r$r.log" 2>&1 || die "measure failed (step4-ours-r$r.log)"
        grep -E "median|size_vram|nvidia" "$LOGS/step4-ours-r$r.log" | sed 's/^/    /' || true
        # The daemon keeps the model loaded; llama-bench then shares the GPU with it, as
        # the figures of both sides are taken with the other idle, not absent.
        log "    round $r: llama-bench"
        mkdir -p "$LOGS/anchor-r$r"
        LD_LIBRARY_PATH="$rt_path" "$PY" "$MEASURE" anchor --bench "$tools/llama-bench" \
            --model "$model" --reps 2 --logs "$LOGS/anchor-r$r" --out "$LOGS/anchor-r$r.json" \
            > "$LOGS/step4-anchor-r$r.log" 2>&1 || die "llama-bench failed (step4-anchor-r$r.log)"
        grep "llama-bench" "$LOGS/step4-anchor-r$r.log" | sed 's/^/    /' || true
    done
    "$PY" "$MEASURE" merge --kind ours --out "$LOGS/ours.json" "$LOGS"/ours-r*.json
    "$PY" "$MEASURE" merge --kind anchor --out "$LOGS/anchor.json" "$LOGS"/anchor-r*.json
    "$ll" ps > "$LOGS/step4-ps.txt" 2>&1 || true
    stop_daemon
    step_done

    step "5 aggregates at 1, 4 and 16 streams against llama-server"
    local left=$((budget - (SECONDS - t_all) - 30))
    if (( left < 60 )); then
        log "    skipped: ${left}s left of the ${budget}s budget"
    else
        # server_bench imports localllm from the checkout: give it the module step 1 built.
        cp "$(cd "$work" && "$PY" -c 'import localllm._native as m; print(m.__file__)')" \
            "$REPO/localllm/"
        mkdir -p "$LOCALLLM_BENCH_CACHE/llama-tools"
        ln -sfn "$tools" "$LOCALLLM_BENCH_CACHE/llama-tools/bin"
        (cd "$REPO" && LD_LIBRARY_PATH="$rt_path" timeout "$left" "$PY" bench/server_bench.py \
            --model 1b-q4_k_m --ngl 99 --rounds 2 --per-user 2 --output-tokens 64 \
            --levels 1,4,16 --parallel 16) > "$LOGS/step5-server-bench.log" 2>&1 \
            || log "    server_bench failed or ran out of time (see step5-server-bench.log)"
        sed -n '/^model /,$p' "$LOGS/step5-server-bench.log" | sed 's/^/    /'
    fi
    step_done

    step "6 summary"
    printf 'total\t%s\n' "$((SECONDS - t_all))" >> "$TIMINGS"
    local rc=0
    "$PY" "$MEASURE" summary --ours "$LOGS/ours.json" --anchor "$LOGS/anchor.json" \
        --timings "$TIMINGS" --preflight "$LOGS/preflight.log" --gguf "$model" \
        --out "$LOGS/gpu_check.json" --text "$LOGS/summary.txt" || rc=$?
    sed -n '/^model /,$p' "$LOGS/step5-server-bench.log" >> "$LOGS/summary.txt" 2>/dev/null || true
    [[ $rc -eq 0 || $rc -eq 3 ]] || die "summary failed"
    exit "$rc"
}

main "$@"
