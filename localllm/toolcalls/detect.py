"""Which output format a chat template teaches its model, and a parser for that format.

Owns :class:`ChatFormat` and :func:`detect_format`.  Detection reads the template's
text the way llama.cpp's ``common/chat.cpp`` does: each format is recognised by
markup only its templates contain, checked from the most specific to the most
generic (Qwen3-Coder and GLM templates also contain ``<tool_call>``, so they are
checked before Hermes).  A template no dedicated format claims gets the format
derived from the template itself (``derive.py``) when one can be derived, else
``generic``: ``<think>`` splitting and plain text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import FormatParser, Syntax
from localllm.toolcalls.command_r import THINK as COMMAND_R_THINK, command_r
from localllm.toolcalls.deepseek import DeepSeek
from localllm.toolcalls.derive import Derived, derive
from localllm.toolcalls.functionary import Functionary
from localllm.toolcalls.gemma4 import THINK as GEMMA4_THINK, Gemma4
from localllm.toolcalls.glm import Glm
from localllm.toolcalls.granite import granite
from localllm.toolcalls.harmony import MARKERS as HARMONY_MARKERS, HarmonyParser
from localllm.toolcalls.hermes import Hermes
from localllm.toolcalls.kimi import Kimi
from localllm.toolcalls.llama3 import Llama3
from localllm.toolcalls.minimax import THINK as MINIMAX_THINK, MiniMaxM3
from localllm.toolcalls.mistral import Mistral
from localllm.toolcalls.muse import MARKERS as MUSE_MARKERS, MuseParser
from localllm.toolcalls.pythonic import Pythonic
from localllm.toolcalls.shapes import (
    DEEPSEEK_V3_2,
    DEEPSEEK_V4,
    KIMI_K3,
    KIMI_K3_THINK,
    MINICPM5,
    MINIMAX_M2,
    FunctionaryV31,
    apriel,
    nemotron_v2,
)
from localllm.toolcalls.stream import MarkupParser
from localllm.toolcalls.tagged import Tagged
from localllm.toolcalls.thinking import detect_thinking_tags, prompt_opens_thinking
from localllm.toolcalls.xmlcall import XmlCall

THINK = ("<think>", "</think>")

_SYNTAXES: dict[str, Callable[[], Syntax]] = {
    "generic": Syntax,
    "hermes": Hermes,
    "qwen3_coder": XmlCall,
    "seed_oss": lambda: XmlCall("<seed:tool_call>", "</seed:tool_call>", padded=False),
    "llama3": Llama3,
    "mistral": Mistral,
    "mistral_nemo": Mistral,
    "deepseek_r1": DeepSeek,
    "deepseek_v3_1": DeepSeek,
    "glm_4_5": Glm,
    "kimi_k2": Kimi,
    "granite": granite,
    "command_r7b": command_r,
    "functionary_v3_2": Functionary,
    "functionary_v3_1": FunctionaryV31,
    "gemma4": Gemma4,
    "lfm2": Pythonic,
    "minimax_m2": lambda: Tagged(MINIMAX_M2),
    "minimax_m3": MiniMaxM3,
    "deepseek_v3_2": lambda: Tagged(DEEPSEEK_V3_2),
    "deepseek_v4": lambda: Tagged(DEEPSEEK_V4),
    "kimi_k3": lambda: Tagged(KIMI_K3),
    "minicpm5": lambda: Tagged(MINICPM5),
    "nemotron_v2": nemotron_v2,
    "apriel": apriel,
}
# Formats whose reasoning tags are their own, whatever else the template mentions.
_THINK: dict[str, tuple[str, str]] = {
    "command_r7b": COMMAND_R_THINK,
    "kimi_k3": KIMI_K3_THINK,
    "minimax_m3": MINIMAX_THINK,
    "gemma4": GEMMA4_THINK,
}
FORMATS: tuple[str, ...] = (*_SYNTAXES, "gpt_oss", "muse_glimmer", "derived")


@dataclass(frozen=True)
class ChatFormat:
    """One output format: its name, its marker strings, and how to parse a reply in it.

    ``markers`` are every marker string of the format that a GGUF may store as a
    control token; the runner renders exactly these as text so the parser sees them.
    """

    name: str
    markers: tuple[str, ...]
    think_tags: tuple[str, str] | None = THINK
    derived: Derived | None = field(default=None, compare=False)  # the "derived" format's

    def syntax(self) -> Syntax:
        """The call syntax of a marker-based format (not gpt_oss's or Muse's messages)."""
        if self.derived is not None:
            return self.derived.syntax()
        return _SYNTAXES[self.name]()

    def parser(
        self, tools: Sequence[JSONObject] | None, think: bool | None, prompt: str = ""
    ) -> FormatParser:
        """A streaming parser for one reply.  ``think=False`` drops reasoning from the
        output; ``prompt`` (the rendered prompt) tells whether the reply starts inside
        a thinking block the template opened."""
        if self.name == "gpt_oss":
            return HarmonyParser(tools, think)
        if self.name == "muse_glimmer":
            return MuseParser(tools, think)
        tags = self.think_tags
        opened = bool(tags and prompt and prompt_opens_thinking(prompt, *tags))
        return MarkupParser(self.syntax(), tools, think, tags=tags, opened=opened, name=self.name)


@lru_cache(maxsize=64)
def format_named(name: str, template: str = "") -> ChatFormat:
    """The format called ``name`` (one of :data:`FORMATS`), with the template's think tags.

    ``derived`` is the format derived from ``template`` (a ValueError when none can be)."""
    if name not in FORMATS:
        raise ValueError(f"unknown chat format {name!r}")
    if name == "gpt_oss":
        return ChatFormat(name, HARMONY_MARKERS, None)
    if name == "muse_glimmer":
        return ChatFormat(name, MUSE_MARKERS, None)
    derived = derive(template) if name == "derived" else None
    if name == "derived" and derived is None:
        raise ValueError("no tool-call format can be derived from this template")
    tags = (
        _THINK.get(name) or (derived and derived.think) or (detect_thinking_tags(template) or THINK)
    )
    fmt = ChatFormat(name, (), tags, derived)
    markers = tuple(dict.fromkeys((*fmt.syntax().markers, *tags)))
    return ChatFormat(name, markers, tags, derived)


@lru_cache(maxsize=64)
def detect_format(template: str) -> ChatFormat:
    """The output format a chat template (Jinja or Go) teaches; ``generic`` if none.

    Cached: every chat request asks (its plan for the markers, its shaper for the
    parser), and a model's template does not change between requests."""
    name = _detect_name(template)
    if name == "generic" and derive(template) is not None:
        name = "derived"
    return format_named(name, template)


def _detect_name(src: str) -> str:
    def has(*parts: str) -> bool:
        return all(p in src for p in parts)

    if has("<|channel|>"):
        return "gpt_oss"
    if has("<atem:function_calls>"):
        return "muse_glimmer"
    if has(">>>all"):
        return "functionary_v3_2"
    if has("<|tool_calls_section_begin|>"):
        return "kimi_k2"
    if has("<|open|>", "<|close|>", "<|end_of_msg|>"):
        return "kimi_k3"
    if has("dsml_token", "DSML"):
        return "deepseek_v3_2" if "function_calls" in src else "deepseek_v4"
    if has("]<]minimax[>["):
        return "minimax_m3"
    if has("<minimax:tool_call>"):
        return "minimax_m2"
    if has("<|tool_call>call:"):
        return "gemma4"
    if has("<|tool_call_start|>") or has("<|tool_list_start|>") or has("List of tools: ["):
        return "lfm2"
    if has("<TOOLCALL>"):
        return "nemotron_v2"
    if has("<tool_calls>") and (has("[BEGIN FINAL RESPONSE]") or has("<|assistant|>")):
        return "apriel"
    if has('<function name="', '<param name="'):
        return "minicpm5"
    if has("<｜tool▁calls▁begin｜>"):
        # R1 fences the arguments (```json); V3.1 writes them right after the separator.
        return "deepseek_r1" if "```json" in src else "deepseek_v3_1"
    if has("<|START_ACTION|>"):
        return "command_r7b"
    if has("<|tool_call|>"):
        return "granite"
    if has("<tool_call>", "<arg_key>"):
        return "glm_4_5"
    if has("<seed:tool_call>") or has("<seed:think>", "<function="):
        return "seed_oss"
    if has("<tool_call>", "<function=", "<parameter="):
        return "qwen3_coder"
    if has("<function=", "<|start_header_id|>"):
        return "functionary_v3_1"
    if has("[TOOL_CALLS]"):
        return "mistral" if "[ARGS]" in src else "mistral_nemo"
    if has("<tool_call>") and "<invoke name=" not in src:
        return "hermes"
    if (
        has("<|python_tag|>")
        or has("<|start_header_id|>ipython<|end_header_id|>")
        or has("<|start_header_id|>", '"parameters"')
    ):
        return "llama3"
    return "generic"
