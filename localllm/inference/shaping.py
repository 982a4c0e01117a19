"""Shape generated pieces into Ollama's response fields: content, thinking, tool calls, logprobs.

``OutputShaper`` sits between the runner's pieces and the response chunks.  It
parses the reply in the output format the model's chat template teaches
(:func:`localllm.toolcalls.detect_format`): reasoning goes to ``thinking``
whenever the model emits it (dropped when ``think`` is false), tool-call markup
becomes ``tool_calls`` objects when the request carried tools, and logprobs are
formatted.  ``grammar_for`` turns a request's ``format`` (or ``grammar``) into a GBNF grammar.
"""

from __future__ import annotations

from typing import TypedDict

from localllm.api.thinkbudget import parse_think
from localllm.api.wire import JSONObject, Logprob, ToolCall
from localllm.errors import InvalidRequest
from localllm.grammar.json_schema import grammar_for_format
from localllm.grammar.rules import MAX_GRAMMAR_BYTES
from localllm.inference.service import Target
from localllm.runner.messages import Piece
from localllm.toolcalls import ChatFormat, Family, Parsed, detect_format, format_named


class Parts(TypedDict, total=False):
    """What one piece (or the end) adds to the reply; a chunk is built from it."""

    content: str
    thinking: str
    tool_calls: list[ToolCall]
    logprobs: list[Logprob]


def grammar_for(fmt: str | JSONObject | None, grammar: str | None = None) -> str | None:
    """``"json"`` or a JSON Schema → GBNF; empty → none; anything else → 400.  A raw GBNF
    ``grammar`` (llama-server's field) is used as it is; both at once are a 400."""
    if grammar:
        if fmt is not None and fmt != "":
            raise InvalidRequest("format and grammar cannot both be set: send one")
        if len(grammar.encode("utf-8")) > MAX_GRAMMAR_BYTES:  # as format's grammars
            raise InvalidRequest(f"grammar is over {MAX_GRAMMAR_BYTES} bytes")
        return grammar
    if fmt is None or fmt == "":
        return None
    return grammar_for_format(fmt)


def think_flag(value: bool | str | None) -> bool | None:
    """Ollama's ``think`` as on or off (a level means on); None: the model's default."""
    think = parse_think(value)
    return think if think is None or isinstance(think, bool) else True


def think_level(value: bool | str | None) -> str | None:
    """The level of a ``think`` that names one."""
    think = parse_think(value)
    return think if isinstance(think, str) else None


def chat_format(target: Target, tool_family: Family | None = None) -> ChatFormat:
    """The output format the reply is parsed in: ``tool_family`` when a forced call
    names one, else the one the model's chat template teaches."""
    template = target.info.chat_template or ""
    return format_named(tool_family, template) if tool_family else detect_format(template)


class OutputShaper:
    """Turns a stream of pieces into response parts (see the module docstring)."""

    def __init__(
        self,
        target: Target,
        *,
        think: bool | None,
        tools: list[JSONObject] | None,
        logprobs: bool,
        prompt: str = "",
        tool_family: Family | None = None,
    ) -> None:
        fmt = chat_format(target, tool_family)
        if tool_family:
            # A forced call is written in ``tool_family``'s markup (see grammar/tools.py),
            # first thing in the reply: a block the prompt opened is not being continued.
            prompt = ""
        self._parser = fmt.parser(tools, think, prompt)
        self._logprobs = logprobs
        self.tool_calls_seen = False

    def feed(self, piece: Piece) -> Parts:
        parts: Parts = {}
        text = piece.text
        if self._logprobs and piece.logprob is not None:
            entry: Logprob = {"token": piece.text, "logprob": piece.logprob}
            if piece.top_logprobs:
                entry["top_logprobs"] = [
                    {"token": t, "logprob": lp} for t, lp in piece.top_logprobs
                ]
            parts["logprobs"] = [entry]
        return self._split(text, parts, final=False)

    def finish(self) -> Parts:
        return self._split("", {}, final=True)

    def _split(self, text: str, parts: Parts, *, final: bool) -> Parts:
        result: Parsed = self._parser.finish() if final else self._parser.feed(text)
        if result.thinking:
            parts["thinking"] = result.thinking
        if result.calls:
            self.tool_calls_seen = True
            parts["tool_calls"] = [c.to_ollama() for c in result.calls]
        if result.content:
            parts["content"] = result.content
        return parts if (parts or final) else {}
