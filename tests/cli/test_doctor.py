"""``localllm doctor``: runs without a daemon, reports the native build, devices, paths, hints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localllm.cli.main import main
from localllm.hardware import detect as detect_mod
from localllm.hardware.cpu import CPUInfo
from localllm.hardware.probes import GPUProbe

GiB = 1024**3
REPO = Path(__file__).resolve().parents[2]
CPU = CPUInfo("Test CPU 9000", "x86_64", 8, 16, 64 * GiB, 40 * GiB, ("avx2", "fma"))
CPU_DEV = {
    "name": "CPU",
    "description": "Test CPU 9000",
    "type": "cpu",
    "free": 64 * GiB,
    "total": 64 * GiB,
}


def fake_hardware(
    monkeypatch: pytest.MonkeyPatch, answer: dict[str, object], gpus: list[GPUProbe]
) -> None:
    hw = detect_mod.build_hardware(answer, CPU, gpus)
    monkeypatch.setattr(detect_mod, "detect", lambda refresh=False: hw)


def test_json_report_on_this_machine(
    capsys: pytest.CaptureFixture[str], _isolated_home: Path
) -> None:
    rc = main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == (0 if report["native"]["ok"] else 1)
    assert report["version"] and report["python"]["version"].startswith("3.")
    assert any(d["kind"] == "cpu" and d["total"] > 0 for d in report["devices"])
    assert report["cpu"]["logical_cores"] >= 1 and report["cpu"]["total_ram"] > 0
    assert report["paths"]["home"] == str(_isolated_home)
    assert report["paths"]["models"] == str(_isolated_home / "models")
    if report["native"]["ok"]:
        assert report["native"]["build"] and report["native"]["system_info"]
    else:
        assert report["native"]["error"] and report["hints"]


def test_text_report_with_an_unusable_nvidia_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_hardware(
        monkeypatch,
        {
            "ok": True,
            "devices": [CPU_DEV],
            "system_info": "CPU : AVX2 = 1 |",
            "build_info": {
                "llama_version": "0.5.0-dev",
                "llama_cpp_python": "0.3.36",
                "source": "llama-cpp-python",
                "gpu_offload": False,
            },
        },
        [GPUProbe("nvidia", "NVIDIA GeForce RTX 3060", "550.54.14", 12 * GiB, 11 * GiB)],
    )
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "Native:     ok, llama.cpp 0.5.0-dev from llama-cpp-python 0.3.36" in out
    assert "CPU only build" in out and "CPU : AVX2 = 1 |" in out
    assert "  CPU   cpu   CPU      40.0 GiB  64.0 GiB  Test CPU 9000" in out
    assert "nvidia: NVIDIA GeForce RTX 3060, driver 550.54.14, 12.0 GiB" in out
    assert "8 physical / 16 logical cores" in out and "avx2 fma" in out
    assert "Hints:" in out and "run 'localllm backends build cuda'" in out
    assert main(["doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fixes"] == ["localllm backends build cuda"]


def test_the_native_line_names_the_core_and_where_it_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from localllm.backends import core

    fake_hardware(
        monkeypatch,
        {
            "ok": True,
            "devices": [CPU_DEV],
            "system_info": "CPU : AVX2 = 1 |",
            "build_info": {
                "llama_version": "0.5.0-dev",
                "llama_cpp_python": "0.3.36",
                "source": "core",
                "gpu_offload": False,
            },
        },
        [],
    )
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert (
        "Native:     ok, llama.cpp 0.5.0-dev, core built from the llama-cpp-python 0.3.36 "
        f"source (in {core.lib_dir()}), CPU only build"
    ) in out
    assert main(["doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["native"]["core"] == str(core.lib_dir())


def test_fix_runs_the_build_the_hint_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No GPU answers nvidia-smi here, so no pack fits and the CUDA build stops at its
    toolkit check."""
    import subprocess as sp

    fake_hardware(
        monkeypatch,
        {"ok": True, "devices": [CPU_DEV]},
        [GPUProbe("nvidia", "NVIDIA GeForce RTX 3060")],
    )
    ran: list[list[str]] = []
    real = sp.run

    def spy(argv: list[str], *a: object, **kw: object) -> sp.CompletedProcess[str]:
        ran.append(argv)
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        kw["env"] = {**env, "PATH": "/nonexistent"}  # no nvcc, no nvidia-smi
        return real(argv, *a, **kw)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(sp, "run", spy)
    assert main(["doctor", "--fix"]) == 1
    # A prebuilt pack first (none fits: no GPU answers, so its architecture is unknown).
    assert [argv[-3:] for argv in ran] == [
        ["backends", "get", "cuda"],
        ["backends", "build", "cuda"],
    ]
    out = capsys.readouterr().out
    assert "Running: localllm backends get cuda" in out and "building it instead" in out
    assert "Running: localllm backends build cuda" in out


def test_broken_native_module_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_hardware(monkeypatch, {"ok": False, "error": "ImportError: no _native"}, [])
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "Native:     NOT AVAILABLE: ImportError: no _native" in out
    assert "native module is not usable" in out
    assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["devices"][0]["name"] == "CPU" and report["native"]["ok"] is False


def test_says_when_jinja_is_too_old_to_render_templates(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """jinja2 3.1.0-3.1.5 let a GGUF's template escape the sandbox: doctor names it and the fix
    (the installed one is new enough, so its version is faked)."""
    import jinja2

    fake_hardware(monkeypatch, {"ok": True, "devices": [CPU_DEV]}, [])
    assert main(["doctor"]) == 0
    assert f"Templates:  jinja2 {jinja2.__version__}, sandboxed" in capsys.readouterr().out
    monkeypatch.setattr(jinja2, "__version__", "3.1.4")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "Templates:  jinja2 3.1.4, REFUSED: Jinja chat templates will not render" in out
    assert "Hints:" in out and "pip install --upgrade 'jinja2>=3.1.6'" in out
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["templates"]["jinja2"] == "3.1.4" and report["templates"]["ok"] is False
    assert "CVE-2024-56326" in report["templates"]["problem"]
    assert report["templates"]["problem"] in report["hints"]


def test_runs_as_a_command_without_a_daemon(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["LOCALLLM_HOST"] = "127.0.0.1:9"  # nothing listens there; doctor must not care
    out = subprocess.run(
        [sys.executable, "-m", "localllm", "doctor"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode in (0, 1), out.stderr
    assert "Devices the engine can use:" in out.stdout
    assert not (tmp_path / "localllm-home").exists()
