"""gguf/archs.py: the architectures the pinned llama.cpp loads, the same list as its source."""

from __future__ import annotations

import re

import pytest

from localllm import paths
from localllm.backends import sdist
from localllm.gguf import archs


def test_the_list_is_the_pinned_sources() -> None:
    source = paths.cache() / "source" / f"llama.cpp-{sdist.VERSION}" / "src" / "llama-arch.cpp"
    if not source.is_file():
        pytest.skip(f"the pinned llama.cpp source is not unpacked here ({source})")
    text = source.read_text()
    table = text.split("LLM_ARCH_NAMES = {", 1)[1].split("};", 1)[0]
    names = set(re.findall(r'\{\s*LLM_ARCH_\w+,\s*"([^"]+)"\s*\}', table))
    assert names - {"clip", "(unknown)"} == archs.ARCHITECTURES


def test_known() -> None:
    assert archs.known("llama") and archs.known("qwen2") and archs.known("gemma3")
    assert not archs.known("clip")  # a projector, not a model
    assert not archs.known("ollamaonly") and not archs.known("")
