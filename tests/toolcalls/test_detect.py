"""Format detection on the real chat templates shipped in the pinned llama-cpp-python sdist.

The templates are read from the cached sdist (never copied into the repository);
the expected formats follow llama.cpp's ``common/chat.cpp``.
"""

from __future__ import annotations

import tarfile

import pytest

from localllm.backends.source import core_version, fetch_sdist
from localllm.toolcalls import FORMATS, detect_format, format_named

EXPECTED = {
    "Apertus-8B-Instruct": "derived",
    "Apriel-1.6-15b-Thinker-fixed": "apriel",
    "Bielik-11B-v3.0-Instruct": "hermes",
    "ByteDance-Seed-OSS": "seed_oss",
    "Cohere2MoE": "command_r7b",
    "CohereForAI-c4ai-command-r-plus-tool_use": "derived",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "command_r7b",
    "GLM-4.6": "glm_4_5",
    "GLM-4.7-Flash": "glm_4_5",
    "GigaChat3-10B-A1.8B": "derived",
    "GigaChat3.1-10B-A1.8B": "derived",
    "Kimi-K2-Instruct": "kimi_k2",
    "Kimi-K2-Thinking": "kimi_k2",
    "Kimi-K3": "kimi_k3",
    "LFM2-8B-A1B": "lfm2",
    "LFM2.5-8B-A1B": "lfm2",
    "LFM2.5-Instruct": "lfm2",
    "MiMo-VL": "hermes",
    "MiniMax-M1": "derived",
    "MiniMax-M2": "minimax_m2",
    "MiniMax-M3": "minimax_m3",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "qwen3_coder",
    "NVIDIA-Nemotron-Nano-v2": "nemotron_v2",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes",
    "Qwen-QwQ-32B": "hermes",
    "Qwen-Qwen2.5-7B-Instruct": "hermes",
    "Qwen-Qwen3-0.6B": "hermes",
    "Qwen3-Coder": "qwen3_coder",
    "Qwen3.5-4B": "qwen3_coder",
    "Reka-Edge": "hermes",
    "Spark2.5": "glm_4_5",
    "StepFun3.5-Flash": "qwen3_coder",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "deepseek_r1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek_r1",
    "deepseek-ai-DeepSeek-V3.1": "deepseek_v3_1",
    "deepseek-ai-DeepSeek-V3.2": "deepseek_v3_2",
    "deepseek-ai-DeepSeek-V4": "deepseek_v4",
    "deepseek-ai-DeepSeek-V4-Flash-0731": "deepseek_v4",
    "google-gemma-4-31B-it": "gemma4",
    "google-gemma-4-31B-it-interleaved": "gemma4",
    "ibm-granite-granite-3.3-2B-Instruct": "granite",
    "ibm-granite-granite-4.0": "hermes",
    "ibm-granite-granite-4.1": "hermes",
    "inclusionai-ling-3.0-flash": "glm_4_5",
    "llama-cpp-deepseek-r1": "deepseek_r1",
    "meetkai-functionary-medium-v3.1": "functionary_v3_1",
    "meetkai-functionary-medium-v3.2": "functionary_v3_2",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral_nemo",
    "moonshotai-Kimi-K2": "kimi_k2",
    "muse-glimmer": "muse_glimmer",
    "openai-gpt-oss-120b": "gpt_oss",
    "openbmb-MiniCPM5-1B": "minicpm5",
    "poolside-Laguna-S-2.1": "glm_4_5",
    "poolside-Laguna-XS-2.1": "glm_4_5",
    "poolside-Laguna-XS.2": "glm_4_5",
    "tencent-Hy3": "derived",
    "unsloth-Apriel-1.5": "apriel",
    "unsloth-mistral-Devstral-Small-2507": "mistral",
    "upstage-Solar-Open-100B": "derived",
    # No tool calls in the template (Gemma 2, Phi-3.5, RWKV, SmolLM3's own xml_tools), or
    # a template our renderer cannot render with tools (FireFunction v2 reads a
    # `functions` variable nobody defines): <think> splitting and plain text.
    "google-gemma-2-2b-it": "generic",
    "microsoft-Phi-3.5-mini-instruct": "generic",
    "llama-cpp-rwkv-world": "generic",
    "HuggingFaceTB-SmolLM3-3B": "generic",
    "fireworks-ai-llama-3-firefunction-v2": "generic",
}


@pytest.fixture(scope="module")
def templates() -> dict[str, str]:
    out = {}
    with tarfile.open(fetch_sdist(core_version())) as tar:
        for member in tar.getmembers():
            path = member.name
            if "/vendor/llama.cpp/models/templates/" in path and path.endswith(".jinja"):
                data = tar.extractfile(member)
                assert data is not None
                out[path.rsplit("/", 1)[-1].removesuffix(".jinja")] = data.read().decode()
    return out


def test_real_templates(templates: dict[str, str]) -> None:
    # Every template of the pinned llama.cpp is listed: a new one must be looked at.
    assert set(templates) == set(EXPECTED)
    got = {name: detect_format(templates[name]).name for name in EXPECTED}
    assert got == EXPECTED


def test_think_tags_follow_the_template(templates: dict[str, str]) -> None:
    assert detect_format(templates["mistralai-Ministral-3-14B-Reasoning-2512"]).think_tags == (
        "[THINK]",
        "[/THINK]",
    )
    assert detect_format(templates["ByteDance-Seed-OSS"]).think_tags == (
        "<seed:think>",
        "</seed:think>",
    )
    assert "<|START_THINKING|>" in detect_format(templates["Cohere2MoE"]).markers
    assert detect_format(templates["openai-gpt-oss-120b"]).think_tags is None


@pytest.mark.parametrize(
    ("name", "markers"),
    [
        ("mistral", ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")),
        ("llama3", ("<|python_tag|>",)),
        ("granite", ("<|tool_call|>", "<think>", "</think>")),
        (
            "gpt_oss",
            (
                "<|channel|>",
                "<|message|>",
                "<|start|>",
                "<|end|>",
                "<|call|>",
                "<|constrain|>",
                "<|return|>",
            ),
        ),
        ("kimi_k2", ("<|tool_calls_section_begin|>", "<|tool_call_argument_begin|>")),
        ("deepseek_r1", ("<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>")),
    ],
)
def test_markers(name: str, markers: tuple[str, ...]) -> None:
    assert set(markers) <= set(format_named(name).markers)


def test_every_format_is_named_and_frozen() -> None:
    for name in FORMATS:
        if name == "derived":
            continue  # derived from a template: see test_derive.py
        fmt = format_named(name)
        assert fmt.name == name and fmt.parser(None, None).finish().content == ""
    with pytest.raises(ValueError):
        format_named("nope")
    with pytest.raises(ValueError):
        format_named("derived", "{{ messages[0].content }}")
