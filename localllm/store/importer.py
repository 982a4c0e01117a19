"""The config blob of a model stored from GGUF files: Ollama's fields, from the header.

``config_for`` is the one place that derives it from GGUF metadata, for pulls
from the Hub and Ollama's registry and for ``create``.
"""

from __future__ import annotations

from typing import Any

from localllm.gguf.info import ModelInfo


def config_for(info: ModelInfo) -> dict[str, Any]:
    """The manifest's config blob (Ollama's fields) for a model with ``info``."""
    return {
        "model_format": "gguf",
        "model_family": info.architecture,
        "model_families": [info.architecture],
        "model_type": info.parameter_size,
        "file_type": info.file_type,
    }
