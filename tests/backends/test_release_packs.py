"""packaging/release-packs.sh: one pack per architecture, its figures and its trusted line.

A CUDA build takes half an hour here, so the script runs against a stand-in for
``python -m localllm`` that does what the two commands leave behind (a plugin
file; a pack and the lines ``backends pack`` prints).  What is tested is the
script's own part: the loop, the timing, the check of the sha256 it prints
against the file, the summary and the lines for trusted.toml, and that a build
that leaves no plugin stops it.  The real run's figures are in the commit that
added the first line to trusted.toml.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "packaging" / "release-packs.sh"

STAND_IN = r"""#!/usr/bin/env bash
# python -m localllm backends build|pack, and python -c for the logs folder.
if [[ "$1" == "-c" ]]; then echo "$STUB_LOGS"; exit 0; fi
verb=$4
if [[ "$verb" == build ]]; then
    arch=$7
    [[ "$arch" == 61 ]] && { echo "no nvcc for sm_61" >&2; exit 1; }
    mkdir -p "$LOCALLLM_BACKENDS/0.25.3" "$STUB_LOGS"
    printf 'plugin for %s' "$arch" > "$LOCALLLM_BACKENDS/0.25.3/libggml-cuda.so"
    echo "# build log $arch" > "$STUB_LOGS/backend-build-cuda.log"
    # The build's own line, which the script reads the plugin's path from.
    echo "Built cuda for ggml 0.25.3 in 1.0 s: $LOCALLLM_BACKENDS/0.25.3/libggml-cuda.so (0.0 MB)"
    echo "On this machine: no CUDA device."
    exit 0
fi
out=$7
arch=$(sed 's/plugin for //' "$LOCALLLM_BACKENDS/0.25.3/libggml-cuda.so")
f="$out/cuda-ggml0.25.3-linux-x86_64-sm$arch.tar.gz"
printf 'pack of sm%s' "$arch" > "$f"
what="linux-x86_64, architectures $arch-real, toolkit CUDA 13.0.88 (nvcc)"
echo "Packed cuda for ggml 0.25.3 ($what): $f (0.0 MB)"
echo "sha256 $(sha256sum "$f" | cut -d' ' -f1)"
"""


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    stub = tmp_path / "python"
    stub.write_text(STAND_IN)
    stub.chmod(0o755)
    env = {**os.environ, "PYTHON": str(stub), "STUB_LOGS": str(tmp_path / "logs")}
    return subprocess.run(
        ["bash", str(SCRIPT), "--out", str(tmp_path / "out"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_each_architecture_gets_a_pack_its_figures_and_its_line(tmp_path: Path) -> None:
    out = run(tmp_path, "--arch", "90,120")
    assert out.returncode == 0, out.stderr
    rows = (tmp_path / "out" / "summary.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["arch", "wall_s", "cpu_s", "plugin_bytes", "pack_bytes", "pack"]
    assert [r.split("\t")[0] for r in rows[1:]] == ["90", "120"]
    assert rows[1].split("\t")[5] == "cuda-ggml0.25.3-linux-x86_64-sm90.tar.gz"
    pack = tmp_path / "out" / "packs" / "cuda-ggml0.25.3-linux-x86_64-sm90.tar.gz"
    sha = hashlib.sha256(pack.read_bytes()).hexdigest()
    lines = (tmp_path / "out" / "trusted-lines.toml").read_text().splitlines()
    assert lines[0] == f'    {{ file = "{pack.name}", sha256 = "{sha}" }},'
    assert len(lines) == 2
    log = tmp_path / "out" / "logs" / "backend-build-sm120.log"
    assert log.read_text() == "# build log 120\n"


def test_a_build_that_leaves_no_plugin_stops_the_run(tmp_path: Path) -> None:
    out = run(tmp_path, "--arch", "61 90")
    assert out.returncode == 1 and "sm_61: FAILED" in out.stdout + out.stderr
    assert "no nvcc for sm_61" in out.stderr
    assert not list((tmp_path / "out" / "packs").iterdir())


def test_the_default_set_is_ollamas_for_this_processor_family(tmp_path: Path) -> None:
    out = run(tmp_path, "--dry-run")
    archs = [ln.split("--arch ")[1].split()[0] for ln in out.stdout.splitlines() if "--arch" in ln]
    if os.uname().machine == "x86_64":
        assert archs == ["75", "80", "86", "89", "90", "100", "103", "120"]
