"""The rows of the tool-call conformance matrix: every chat template of the pinned llama.cpp
that teaches tool calls, with the reply its script model gives and what it must parse to.

Owned by ``test_matrix.py``.  A row's replies are built from its format's raw call
(``tests/support/toolcall_samples.py``, after llama.cpp's tests/test-chat.cpp) and the
template's own prompt: where the generation prompt opens a thinking block, the reply
first closes it (and that reasoning must come back as thinking).  A third reply, to the
forced question, is a call the forced-call grammar itself writes (a seeded walk over
it), so ``tool_choice: required`` is checked end to end on the real tokenizer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from localllm.grammar.tools import forced_tool_grammar
from localllm.template.jinja import TemplateError
from localllm.template.select import render_prompt
from localllm.toolcalls import ChatFormat, detect_format
from localllm.toolcalls.thinking import prompt_opens_thinking
from tests.support import toolcall_samples as s
from tests.support.gbnf import accepts, parse_grammar
from tests.support.template_corpus import corpus
from tests.support.tool_grammar import generate
from tests.support.toolcall_helpers import TOOLS

ASK = "Weather in Paris?"  # answered with the family's call
MUSE = "Why is the sky blue?"  # ... with reasoning and text, tools offered
FORCED = "Force the weather in Paris."  # ... with the forced-call grammar's call
W = s.WEATHER_ARGS
SF = ("special_function", {"arg1": 1}, None)
Call = tuple[str, dict[str, Any], "str | None"]  # name, arguments, the id the format gives

# Per format: its raw call reply, the calls it holds, and the content before them.
CALLS: dict[str, tuple[str, tuple[Call, ...], str]] = {
    "hermes": (s.HERMES_CALL, (("get_weather", W, None),), ""),
    "qwen3_coder": (s.XML_CALL, (SF,), ""),
    "seed_oss": (s.SEED_OSS_CALL.split("\n", 1)[1], (SF,), ""),
    "llama3": (s.LLAMA3_JSON, (("get_weather", W, None),), ""),
    "mistral": (s.MISTRAL_CALLS, (("get_weather", W, None), ("noop", {}, None)), "Sure. "),
    "mistral_nemo": (s.MISTRAL_NEMO_CALL, (("get_weather", W, "abc123XYZ"),), ""),
    "gpt_oss": (s.HARMONY_CALL, (SF,), ""),
    "deepseek_r1": (s.DEEPSEEK_R1_CALL, (("get_time", {"city": "Tokyo"}, None),), ""),
    "deepseek_v3_1": (
        s.DEEPSEEK_V31_CALLS.split("</think>", 1)[1],
        (("get_time", {"city": "Paris"}, None), ("get_weather", {"location": "Paris"}, None)),
        "CONTENT",
    ),
    "glm_4_5": (s.GLM_46_CALL.split("</think>\n", 1)[1], (SF,), ""),
    "kimi_k2": (
        s.KIMI_CALLS,
        (
            ("get_weather", {"location": "Paris"}, "functions.get_weather:0"),
            ("special_function", {"arg1": 1}, "functions.special_function:1"),
        ),
        "",
    ),
    "granite": (s.GRANITE_CALLS, (SF, ("get_time", {"city": "Paris"}, None)), ""),
    "command_r7b": (s.COMMAND_R_ACTION, (("special_function", {"arg1": 1}, "0"),), ""),
    "functionary_v3_2": (
        s.FUNCTIONARY_CALLS,
        (("get_time", {"city": "Paris"}, None), ("python", {"code": "print(1)"}, None)),
        "Let me check.",
    ),
    "functionary_v3_1": (s.FUNCTIONARY_V31_CALL, (SF,), ""),
    "gemma4": (s.GEMMA4_CALL, (("get_time", {"city": "Paris"}, None),), ""),
    "lfm2": (s.LFM2_CALLS, (SF, ("get_time", {"city": "Paris"}, None)), ""),
    "minimax_m2": (s.MINIMAX_M2_CALL, (SF,), ""),
    "minimax_m3": (s.MINIMAX_M3_CALL, (("get_time", {"city": "Tokyo"}, None),), ""),
    "deepseek_v3_2": (s.DSML_CALL, (("get_time", {"city": "Tokyo"}, None),), ""),
    "deepseek_v4": (s.DSML_V4_CALL, (("get_time", {"city": "Tokyo"}, None),), ""),
    "kimi_k3": (s.KIMI_K3_CALL, (SF,), ""),
    "minicpm5": (s.MINICPM5_CALL, (("python", {"code": "print('hey')"}, None),), ""),
    "nemotron_v2": (s.NEMOTRON_V2_CALL, (SF,), ""),
    "apriel": (s.APRIEL_CALL, (SF,), ""),
    "muse_glimmer": (s.MUSE_CALL, (SF,), ""),
}
# Derived formats: the call in each template's own markup.
DERIVED: dict[str, tuple[str, tuple[Call, ...], str]] = {
    "Apertus-8B-Instruct": (s.APERTUS_CALL, (SF,), ""),
    "upstage-Solar-Open-100B": (s.SOLAR_CALL, (("get_time", {"city": "Paris"}, "a1b2c3d4e"),), ""),
    "tencent-Hy3": (s.HY3_CALL, (("get_time", {"city": "Paris"}, None),), ""),
    "GigaChat3-10B-A1.8B": (s.GIGACHAT3_CALL, (SF,), ""),
    "GigaChat3.1-10B-A1.8B": (s.GIGACHAT31_CALL, (SF,), ""),
    "MiniMax-M1": (s.MINIMAX_M1_CALL, (SF, ("get_time", {"city": "Paris"}, None)), ""),
    "CohereForAI-c4ai-command-r-plus-tool_use": (s.COMMAND_R_PLUS_CALL, (SF,), ""),
}
# Families whose replies are messages rather than text with markers.
MUSED = {
    "gpt_oss": (s.HARMONY_FINAL, ("I'm\nthinking", "Hello, world!")),
    "muse_glimmer": (s.MUSE_ANSWER, ("I'm\nthinking", "Hello, world!")),
    "functionary_v3_2": ("all\nAnswer.", ("", "Answer.")),
}
# gpt-oss: <|return|> ends a reply; with <|call|> in the vocabulary llama.cpp stops
# treating <|end|> as the end of generation, as for the real vocabulary.
EOS = {"gpt_oss": "<|return|>"}
VOCAB = {"gpt_oss": ("<|call|>",)}


@dataclass
class Row:
    """One template: its family, and each question's reply and expected parse."""

    template: str  # file stem in the sdist's corpus
    fmt: ChatFormat
    call: str
    calls: tuple[Call, ...]
    content: str
    thinking: str
    muse: str
    mused: tuple[str, str]  # (thinking, content)
    forced: str = ""
    forced_call: tuple[str, dict[str, Any]] = ("", {})
    eos: str = "</s>"
    vocab: tuple[str, ...] = field(default=())

    @property
    def model(self) -> str:
        return "m-" + "".join(c if c.isalnum() else "-" for c in self.template.lower())[:60]

    @property
    def family(self) -> str:
        return self.fmt.name if self.fmt.name != "derived" else f"derived ({self.template})"

    @property
    def source(self) -> str:
        return corpus()[self.template + ".jinja"]

    def tools(self) -> list[dict[str, Any]]:
        # With descriptions: gpt-oss's template concatenates them (a missing one fails).
        want = {c[0] for c in self.calls}
        return [described(t) for t in TOOLS if t["function"]["name"] in want]

    def forced_tools(self) -> list[dict[str, Any]]:
        return [described(t) for t in TOOLS if t["function"]["name"] == "get_weather"]

    def trigger(self, question: str, tools: list[dict[str, Any]]) -> str:
        """The rendered prompt's tail from ``question`` on: the token the reply follows."""
        prompt = self.prompt(question, tools)
        return prompt[prompt.rindex(question) :]

    def prompt(self, question: str, tools: list[dict[str, Any]]) -> str:
        return render_prompt(
            None,
            self.source,
            [{"role": "user", "content": question}],
            tools=tools,
            bos_token="<s>",
            eos_token=self.eos,
        )


def described(tool: dict[str, Any]) -> dict[str, Any]:
    """``tool`` with descriptions, its parameters' too, as agents send them (Command R+'s
    template reads every parameter's description, gpt-oss's the tool's)."""
    params = tool["function"]["parameters"]
    props = {k: {**v, "description": k} for k, v in params["properties"].items()}
    return {
        **tool,
        "function": {
            **tool["function"],
            "description": "A tool.",
            "parameters": {**params, "properties": props},
        },
    }


def stems() -> list[str]:
    """Every template of the corpus (cheap: the rows are built when the tests run)."""
    return [name.removesuffix(".jinja") for name in corpus()]


@lru_cache(maxsize=1)
def rows() -> tuple[list[Row], dict[str, str]]:
    """The rows, and the templates that teach calls yet cannot be rendered with tools
    (with the renderer's error)."""
    out, unrendered = [], {}
    for name, source in corpus().items():
        stem = name.removesuffix(".jinja")
        fmt = detect_format(source)
        if fmt.name == "generic":
            continue
        try:
            out.append(_row(stem, fmt))
        except TemplateError as exc:
            unrendered[stem] = exc.message
    return out, unrendered


def _row(stem: str, fmt: ChatFormat) -> Row:
    call, calls, content = DERIVED[stem] if fmt.name == "derived" else CALLS[fmt.name]
    row = Row(
        stem,
        fmt,
        call,
        calls,
        content,
        "",
        "",
        ("", ""),
        eos=EOS.get(fmt.name, "</s>"),
        vocab=VOCAB.get(fmt.name, ()),
    )
    if fmt.name in MUSED:
        row.muse, row.mused = MUSED[fmt.name]
        row.thinking = "I'm\nthinking" if fmt.name == "gpt_oss" else ""
    else:
        assert fmt.think_tags is not None
        opening, closing = fmt.think_tags
        opened = prompt_opens_thinking(row.prompt(ASK, row.tools()), opening, closing)
        if opened:
            row.call, row.thinking = "plan" + closing + call, "plan"
        row.muse = ("" if opened else opening) + "plan" + closing + "Answer."
        row.mused = ("plan", "Answer.")
    row.forced, row.forced_call = _forced(row)
    return row


def _forced(row: Row) -> tuple[str, tuple[str, dict[str, Any]]]:
    """A call the forced-call grammar writes for the forced tool, and what it parses to."""
    got = forced_tool_grammar(row.forced_tools(), row.source)
    assert got is not None, row.template
    grammar, family = got
    rules = parse_grammar(grammar)
    rng = random.Random(row.template)
    text = ""
    while not text.strip():
        text = generate(rules, rules["root"], rng)
    assert accepts(grammar, text)
    parser = row.fmt.parser(row.forced_tools(), None) if family == row.fmt.name else None
    assert parser is not None, (row.template, family)
    out = parser.feed(text)
    out.extend(parser.finish())
    assert len(out.calls) == 1 and not out.content.strip(), (row.template, text)
    return text, (out.calls[0].name, out.calls[0].arguments)
