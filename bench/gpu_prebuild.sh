#!/usr/bin/env bash
# Prepare here, with a package index and no GPU, everything bench/gpu_check.sh needs
# on a GPU machine that has the NVIDIA driver and no network, so that its minutes go
# to measuring.
#
#   bash bench/gpu_prebuild.sh [--dry-run] [DIR]      # DIR defaults to .gpu-check/
#
# Writes DIR/ (git-ignored: name it in the device call's carry):
#   core/     localllm's own core: native/core_build.py's cached build (include/,
#             lib/, core.json; on x86-64 the CPU backend as per-ISA variants, so it
#             runs on the GPU machine's processor); gpu_check installs localllm
#             against it (LOCALLLM_LLAMA_PREFIX) and compiles only the shim there
#   pack/     the CUDA pack for GPU_ARCH (default 90: H100, H200) and pack.sha256:
#             from packaging/release-packs.sh's output (RELEASE_PACKS_OUT), built
#             with it when missing (the wheel toolkit: no system nvcc needed here)
#   tools/    llama-bench and llama-server from the same pinned llama.cpp source,
#             ggml built as loadable backends (GGML_BACKEND_DL, CPU variants) and
#             without CUDA: at run time they load the pack's libggml-cuda.so, the
#             very file localllm loads, so both sides run the same kernels and no
#             second CUDA compile is needed; rpath $ORIGIN, stripped
#   wheels/   localllm's dependencies for CPython 3.12 (the GPU image's python3),
#             less those the image has (GPU_PREBUILD_SKIP)
# cuBLAS and the CUDA runtime are not carried (600 MB; a device call carries 64 MiB):
# the pack names NVIDIA's wheels, which the GPU image has installed (PyTorch's), and
# gpu_check installs them into localllm's cache from there, checked file by file.
#
# --dry-run: check the prerequisites and say what each step would do, build nothing.
# GPU_PREBUILD_STEPS="core pack tools wheels" runs only the steps named.
# Build trees stay outside the repository (GPU_PREBUILD_WORK, ~/.cache/localllm-gpu).
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
WORK="${GPU_PREBUILD_WORK:-$HOME/.cache/localllm-gpu}"
RELEASE="${RELEASE_PACKS_OUT:-$HOME/.cache/localllm-release}"
ARCH="${GPU_ARCH:-90}"
JOBS="${GPU_PREBUILD_JOBS:-$(nproc)}"
SKIP="${GPU_PREBUILD_SKIP:-numpy jinja2 markupsafe httpx httpcore h11 anyio idna certifi sniffio typing_extensions filelock fsspec pyyaml tqdm packaging huggingface_hub hf_xet pillow requests urllib3 charset_normalizer}"
DRY=0
DIR=""
for a in "$@"; do
    case "$a" in
        --dry-run) DRY=1 ;;
        -h | --help) sed -n '2,/^set -/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) DIR=$a ;;
    esac
done
DIR="${DIR:-$REPO/.gpu-check}"

say() { printf '%s gpu_prebuild: %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { say "FAILED: $*" >&2; exit 1; }
[[ -x "$PY" ]] || die "no $PY: install the project first"
for t in cmake ninja strip; do command -v "$t" > /dev/null || die "$t not found"; done
mkdir -p "$DIR" "$WORK"
DIR="$(cd "$DIR" && pwd)"

# 1. The core, as the install builds and caches it.
core_step() {
    local root
    root=$("$PY" - "$REPO/native/core_build.py" <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("core_build", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
print(m.cache_root() / "core" / m.key())
EOF
)
    if [[ $DRY == 1 ]]; then
        say "core: would copy $root (cached: $([[ -f $root/core.json ]] && echo yes || echo 'no: built first, minutes'))"
        return
    fi
    [[ -f "$root/core.json" ]] || "$PY" - "$REPO/native/core_build.py" <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("core_build", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
m.ensure()
EOF
    rm -rf "$DIR/core" && mkdir -p "$DIR/core"
    cp -a "$root/include" "$root/lib" "$root/core.json" "$DIR/core/"
    say "core: $(du -sh "$DIR/core" | cut -f1) from $root"
}

# 2. The pack, as a release publishes it.
pack_step() {
    local pack
    pack=$(ls "$RELEASE"/packs/cuda-ggml*-sm"$ARCH".tar.gz 2>/dev/null | tail -n 1 || true)
    if [[ -z "$pack" ]]; then
        if [[ $DRY == 1 ]]; then
            say "pack: none in $RELEASE/packs: would run packaging/release-packs.sh --arch $ARCH (20-50 min on 2 cores)"
            return
        fi
        RELEASE_PACKS_OUT="$RELEASE" nice -n 10 bash "$REPO/packaging/release-packs.sh" \
            --arch "$ARCH" --jobs "$JOBS"
        pack=$(ls "$RELEASE"/packs/cuda-ggml*-sm"$ARCH".tar.gz | tail -n 1)
    fi
    if [[ $DRY == 1 ]]; then
        say "pack: would copy $pack ($(stat -c %s "$pack") bytes)"
        return
    fi
    rm -rf "$DIR/pack" && mkdir -p "$DIR/pack"
    cp "$pack" "$DIR/pack/"
    sha256sum "$pack" | cut -d' ' -f1 > "$DIR/pack/pack.sha256"
    say "pack: $(basename "$pack"), $(stat -c %s "$pack") bytes"
}

# 3. llama.cpp's tools from the same source, loading backends at run time.
tools_step() {
    local src bdir="$WORK/tools-build"
    src=$("$PY" -c 'from localllm.backends import source; print(source.ensure(None).absolute())')
    local flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON
        -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF -DGGML_CUDA=OFF
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF
        -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN")
    if [[ $DRY == 1 ]]; then
        say "tools: would configure $src into $bdir with ${flags[*]}"
        say "tools: then ninja llama-bench llama-server (463 steps, the CPU variants included; -j $JOBS)"
        return
    fi
    cmake -S "$src" -B "$bdir" "${flags[@]}" > "$WORK/tools-configure.log" 2>&1 \
        || die "configure failed (see $WORK/tools-configure.log)"
    # With GGML_BACKEND_DL, ggml depends on every CPU variant: the tools bring them all.
    nice -n 10 ninja -C "$bdir" -j "$JOBS" llama-bench llama-server \
        > "$WORK/tools-build.log" 2>&1 || die "tools build failed (see $WORK/tools-build.log)"
    rm -rf "$DIR/tools" && mkdir -p "$DIR/tools"
    cp "$bdir"/bin/llama-bench "$bdir"/bin/llama-server "$DIR/tools/"
    cp -P "$bdir"/bin/*.so* "$DIR/tools/"
    find "$DIR/tools" -type f -exec strip --strip-unneeded {} +
    say "tools: $(du -sh "$DIR/tools" | cut -f1) ($(ls "$DIR/tools" | wc -l) files)"
}

# 4. The dependencies for CPython 3.12, wheels only.
wheels_step() {
    local req="$WORK/requirements.txt"
    "$PY" - "$REPO/pyproject.toml" > "$req" <<'EOF'
import sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
print("\n".join([*deps, "setuptools", "wheel"]))
EOF
    if [[ $DRY == 1 ]]; then
        say "wheels: would download $(wc -l < "$req") requirements and their closure for cp312, less: $SKIP"
        return
    fi
    rm -rf "$DIR/wheels" && mkdir -p "$DIR/wheels"
    "$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
        --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
        -d "$DIR/wheels" -r "$req" > "$WORK/wheels.log" 2>&1 \
        || die "pip download failed (see $WORK/wheels.log)"
    local name
    for name in $SKIP; do rm -f "$DIR"/wheels/"$name"-*.whl; done
    say "wheels: $(ls "$DIR"/wheels | wc -l) files, $(du -sh "$DIR/wheels" | cut -f1)"
}

for s in ${GPU_PREBUILD_STEPS:-core pack tools wheels}; do
    "${s}_step"
done
if [[ $DRY == 0 && -z "${GPU_PREBUILD_STEPS:-}" ]]; then
    total=$(( $(git -C "$REPO" ls-files -z | xargs -0 cat | wc -c) + $(du -sb "$DIR" | cut -f1) ))
    say "checkout + $(basename "$DIR"): $((total / 1048576)) MiB (a device call carries 64 MiB)"
    (( total <= 64 * 1048576 )) || say "OVER the limit: see the sizes above"
    bash "$REPO/bench/gpu_check.sh" --dry-run "$DIR"
fi
