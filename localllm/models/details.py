"""How a model is described, one rule each: its ``details``, its capabilities, its times.

A leaf of ``models/``: the list and show use cases (``service.py``), the Hub's and
the registry's dry runs (``remote.py``, ``ollama.py``), the search (``search.py``)
and the inference layer (``/api/ps``, ``created_at``) all describe models with
these, and ``inference`` imports nothing else from ``models/``.

* ``model_details``: Ollama's ``details`` object (``/api/tags``, ``/api/show``,
  ``/api/ps``);
* ``capabilities``: what a model can do, from its template and its layers;
* ``rfc3339``: a time as Ollama writes it (``modified_at``, ``expires_at``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
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


def capabilities(
    template: str, *, embedding: bool, vision: bool, rerank: bool = False
) -> list[str]:
    """What a model can do, judged from its template and layers (as Ollama does): a
    reranker (a classification head) only reranks, an embedding model only embeds.

    The same rule for a stored model and a remote one: ``template_capabilities`` is
    bounded for any template (one past the Jinja size cap is judged by its text)."""
    from localllm.template.caps import template_capabilities

    caps = (
        ["rerank"]
        if rerank
        else ["embedding"]
        if embedding
        else ["completion", *template_capabilities(template)]
    )
    return [*caps, "vision"] if vision else caps


def rfc3339(timestamp: float, *, utc: bool = False, timespec: str = "auto") -> str:
    """``timestamp`` as RFC 3339 text: local time with its offset, as Ollama writes
    ``modified_at``; ``utc``: in UTC with a ``Z``, as it writes ``expires_at`` and
    ``created_at``.  ``timespec`` as ``datetime.isoformat`` takes it (``"seconds"``)."""
    if utc:
        text = datetime.fromtimestamp(timestamp, UTC).isoformat(timespec=timespec)
        return text.replace("+00:00", "Z")
    return datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec=timespec)
