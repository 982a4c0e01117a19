"""A GPU the daemon's driver probe sees and no plugin serves: a stand-in ``nvidia-smi``.

``hardware/probes.py`` asks ``nvidia-smi`` on PATH, as it asks the real one; the probe
child (ggml) lists no CUDA device, so the GPU is unused and the hint names the command.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GPU = "NVIDIA GeForce RTX 4090"


def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in first on PATH, hints on (tests/support/home.py turns them off for every
    other test), a small context for quick loads."""
    tools = tmp_path / "fake-bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in *name,memory.total*) echo "' + GPU + ', 24564, 23010";; esac\n'
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("LOCALLLM_NO_HINTS", raising=False)
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "256")
