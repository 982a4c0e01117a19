"""The forced-call grammar of every format added for issue 31, and of the derived ones.

As ``tests/grammar/test_tools.py`` does for the older formats: random walks over the
grammar (forced for the real template of each family) write calls, which the test
recogniser accepts and the family's own parser reads back as exactly one call with
arguments of the schema's types.  The end-to-end check on each family's script model
is ``tests/inference/test_matrix.py``.
"""

from __future__ import annotations

import pytest

from localllm.grammar.tools import forced_tool_grammar
from localllm.toolcalls import detect_format, format_named
from tests.support.template_corpus import corpus
from tests.support.tool_grammar import TOOLS, walks_parse_back

FAMILIES = {
    "gemma4": "google-gemma-4-31B-it",
    "lfm2": "LFM2.5-8B-A1B",
    "minimax_m2": "MiniMax-M2",
    "minimax_m3": "MiniMax-M3",
    "deepseek_v3_2": "deepseek-ai-DeepSeek-V3.2",
    "deepseek_v4": "deepseek-ai-DeepSeek-V4",
    "kimi_k3": "Kimi-K3",
    "minicpm5": "openbmb-MiniCPM5-1B",
    "functionary_v3_1": "meetkai-functionary-medium-v3.1",
    "nemotron_v2": "NVIDIA-Nemotron-Nano-v2",
    "apriel": "unsloth-Apriel-1.5",
    "muse_glimmer": "muse-glimmer",
    # Derived from their templates.
    "derived/apertus": "Apertus-8B-Instruct",
    "derived/solar": "upstage-Solar-Open-100B",
    "derived/hy3": "tencent-Hy3",
    "derived/gigachat3": "GigaChat3-10B-A1.8B",
    "derived/gigachat3.1": "GigaChat3.1-10B-A1.8B",
    "derived/minimax_m1": "MiniMax-M1",
    "derived/command_r_plus": "CohereForAI-c4ai-command-r-plus-tool_use",
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generated_calls_parse_back(family: str) -> None:
    template = corpus()[FAMILIES[family] + ".jinja"]
    forced = forced_tool_grammar(TOOLS, template)
    assert forced is not None
    grammar, name = forced
    assert name == family.split("/")[0] == detect_format(template).name
    walks_parse_back(grammar, lambda: format_named(name, template).parser(TOOLS, None))
