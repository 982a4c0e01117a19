"""Vision projectors (``mmproj*.gguf``): which one a pull takes, and whether a file is one.

A Hugging Face GGUF repo of a vision model ships its projector next to the
model quants, often in several precisions (``mmproj-F16.gguf``,
``mmproj-BF16.gguf``, ``mmproj-Q8_0.gguf``...).  ``choose_projector`` picks
one: an explicit request (a file name or a precision label, or ``none``) wins;
otherwise the projector of the model's own precision (a BF16 model gets
``mmproj-BF16``), else F16, BF16, F32, Q8_0, else the first by name.  F16 is
the fallback for quantized models because projectors are small and lose more
to quantization than the text model does; llama.cpp's repos publish F16 first.

A projector is stored as a layer of media type ``application/vnd.ollama.image.projector``
(as Ollama does).  ``projector_header`` reads its GGUF header and insists on
``general.architecture = clip`` (libmtmd's projector files), so ``show`` only
claims ``vision`` for a projector that can load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localllm.errors import InvalidModelFile, ModelNotFound
from localllm.gguf.reader import read_header
from localllm.store.hub import HubFile, quant_of

# The order after the model's own precision (see the module docstring).
FALLBACK_ORDER = ("F16", "BF16", "F32", "Q8_0")
NONE = "none"  # an explicit request for no projector


def is_projector_file(filename: str) -> bool:
    low = filename.rsplit("/", 1)[-1].lower()
    return low.endswith(".gguf") and "mmproj" in low


def projector_files(files: list[HubFile]) -> list[HubFile]:
    """The repo's projector files, sorted by path (stable choice and listing)."""
    return sorted((f for f in files if is_projector_file(f.path)), key=lambda f: f.path)


def label(f: HubFile) -> str:
    """A projector's precision (``mmproj-model-f16.gguf`` -> ``F16``)."""
    return quant_of(f.filename).upper()


def choose_projector(
    repo_id: str,
    files: list[HubFile],
    model_label: str,
    requested: str | None = None,
    model_path: str = "",
) -> HubFile | None:
    """The projector a pull takes, or None (no projector in the repo, or ``none`` asked).

    ``requested`` is a file name (or repo path) or a precision label, matched
    case-insensitively; one that matches nothing is a ``ModelNotFound`` that
    lists what the repo has.  ``model_path``: projectors in the model file's
    own folder are preferred (repos with one folder per variant).
    """
    found = projector_files(files)
    if requested is not None and requested.strip().lower() == NONE:
        return None
    if requested:
        want = requested.strip().lower()
        for f in found:
            if want in (f.path.lower(), f.filename.lower()) or want == label(f).lower():
                return f
        names = ", ".join(f.path for f in found) or "none"
        raise ModelNotFound(f"hf.co/{repo_id} has no projector '{requested}'; available: {names}")
    if not found:
        return None
    folder = model_path.rsplit("/", 1)[0] if "/" in model_path else ""
    same = [f for f in found if (f.path.rsplit("/", 1)[0] if "/" in f.path else "") == folder]
    pool = same or found
    for want in (model_label.upper(), *FALLBACK_ORDER):
        for f in pool:
            if label(f) == want:
                return f
    return pool[0]


def projector_header(path: Path, name: str | None = None) -> dict[str, Any]:
    """The projector GGUF's key/values; ``InvalidModelFile`` unless it is a clip projector.

    ``name``: how to call the file in the error (a blob's path says nothing to users)."""
    header = read_header(path)
    arch = header.kv.get("general.architecture")
    if arch != "clip":
        raise InvalidModelFile(
            f"{name or path.name} is not a vision projector (general.architecture is {arch!r}, "
            "expected 'clip')"
        )
    return {k: v for k, v in header.kv.items() if not k.startswith("_token.")}


def is_loadable_projector(path: Path) -> bool:
    """True when ``path`` holds a readable clip projector (what ``show`` calls ``vision``)."""
    try:
        projector_header(path)
    except (InvalidModelFile, OSError):
        return False
    return True
