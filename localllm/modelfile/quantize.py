"""Quantize a GGUF for ``create --quantize``, in a child process, with progress.

The daemon must never load the native module (a crash there would take the
daemon down), so the work runs in ``python -m localllm.engine.quantize_child``
and its per-tensor progress lines come back over a pipe.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from localllm import children, config
from localllm.errors import InvalidRequest, LocalLLMError

# The types /api/create accepts (Ollama's list), keyed by their lower-cased spelling.
QUANT_TYPES = {"q4_k_m": "Q4_K_M", "q4_k_s": "Q4_K_S", "q8_0": "Q8_0", "f16": "F16"}
# Only unquantized weights are quantized: requantizing a Q4 model would just lose quality.
QUANTIZABLE = {"F16", "F32", "BF16"}


def quant_type(name: str) -> str:
    """The libllama type name for a request's ``quantize`` value; 400 for anything else."""
    ftype = QUANT_TYPES.get(name.strip().lower())
    if ftype is None:
        choices = ", ".join(sorted({"q4_K_M", "q4_K_S", "q8_0", "f16"}))
        raise InvalidRequest(f'unsupported quantization type "{name}" (supported: {choices})')
    return ftype


def quantize_file(
    src: Path,
    dst: Path,
    ftype: str,
    progress: Callable[[int, int], None],
    cancel: threading.Event | None = None,
) -> None:
    """Quantize ``src`` to ``ftype`` into ``dst``; ``progress(completed, total)`` per tensor."""
    threads = config.NUM_THREAD.get()
    # Dies with the daemon: a kill -9 must not leave it writing a temporary blob.
    proc = children.spawn(
        "localllm.engine.quantize_child",
        str(src),
        str(dst),
        ftype,
        str(threads),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: list[str] = []
    # stderr is drained by its own thread so a chatty child can never block on a full pipe.
    drain = threading.Thread(target=lambda: errors.extend(proc.stderr or []), daemon=True)
    drain.start()
    watcher = None
    if cancel is not None:

        def watch() -> None:
            while proc.poll() is None:
                if cancel.wait(0.2):
                    proc.kill()
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    try:
        for line in proc.stdout or []:
            try:
                item = json.loads(line)
                progress(int(item["completed"]), int(item["total"]))
            except (ValueError, KeyError, TypeError):
                continue
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        drain.join(5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    if cancel is not None and cancel.is_set():
        raise LocalLLMError("quantization cancelled", status=499)
    if rc != 0:
        text = " ".join(ln.strip() for ln in errors if ln.strip())[-500:]
        raise LocalLLMError(f"quantizing to {ftype} failed: {text or f'exit status {rc}'}")
