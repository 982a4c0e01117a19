"""A model's ``details`` object (Ollama's ``/api/tags``, ``/api/show``, ``/api/ps``): one rule.

A leaf: the store's services, the Hub's and the registry's dry runs and the
inference layer all describe models with it, and none of them imports another
for it (services_hub and services_registry used to import ``services`` for this
function alone, which closed a circle with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localllm.api.wire import Details
from localllm.gguf.info import ModelInfo


def model_details(
    info: ModelInfo | None = None, config: Mapping[str, Any] | None = None, *, brief: bool = False
) -> Details:
    """A model's ``details``: the config layer's values (``config``) first, the GGUF
    header's (``info``) where the config says nothing.  ``brief``: without
    ``parent_model`` and ``families``, as a draft model or a Hub file is described."""
    cfg = config or {}
    family = str(cfg.get("model_family") or "") or (info.architecture if info else "")
    size = str(cfg.get("model_type") or "") or (info.parameter_size if info else "")
    quant = str(cfg.get("file_type") or "") or (info.file_type if info else "")
    fmt = str(cfg.get("model_format") or "gguf")
    if brief:
        return {
            "format": fmt,
            "family": family,
            "parameter_size": size,
            "quantization_level": quant,
        }
    listed = cfg.get("model_families")
    families = [str(f) for f in listed] if isinstance(listed, list) else None
    if info is not None:  # a header read: it names the family when the config does not
        families = families or [info.architecture]
    return {
        "parent_model": "",
        "format": fmt,
        "family": family,
        "families": families,
        "parameter_size": size,
        "quantization_level": quant,
    }
