"""Turn chat messages (and tools) into the prompt text a model was trained on.

The model's own ``tokenizer.chat_template`` (Jinja, from the GGUF) is rendered
with the variables Hugging Face's ``apply_chat_template`` provides: ``messages``
(reasoning under all of its names), ``tools`` and ``documents`` (None when not
given), ``add_generation_prompt``, ``bos_token``, ``eos_token``, plus the think
level in the variables the template reads.  A GGUF without a template is a base
model: it gets the text alone, as Ollama's default ``{{ .Prompt }}`` does, so it
continues what it was given instead of some family's chat markup.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from localllm.api.wire import JSONObject
from localllm.template.jinja import render_jinja
from localllm.template.levels import think_variables

# The names a message's reasoning goes by; templates read one or another
# (Qwen3 and DeepSeek ``reasoning_content``, gpt-oss ``thinking``).
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _normalise(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Shape messages the way HF templates expect (content always a string, args as objects)."""
    out: list[dict[str, Any]] = []
    for raw in messages:
        msg = copy.deepcopy(raw)
        msg["role"] = str(msg.get("role", "user")).lower()
        content = msg.get("content")
        msg["content"] = "" if content is None else content
        calls = msg.get("tool_calls")
        if calls:
            fixed = []
            for call in calls:
                fn = dict(call.get("function") or {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args)
                    except ValueError:
                        pass
                fixed.append({**call, "type": call.get("type", "function"), "function": fn})
            msg["tool_calls"] = fixed
        else:
            msg.pop("tool_calls", None)
        reasoning = next((msg[k] for k in REASONING_FIELDS if msg.get(k) is not None), None)
        if reasoning is not None:
            # As transformers does: fill every name, keeping an explicit ``thinking``.
            msg.setdefault("thinking", reasoning)
            msg["reasoning_content"] = reasoning
        out.append(msg)
    return out


def render_plain(messages: Sequence[Mapping[str, object]]) -> str:
    """A template-less model's prompt: system text, then the turns glued together.

    Ollama's default template renders each prompt followed by its response with
    nothing in between, so a base model reads one continuous text.
    """
    system = "\n\n".join(_text(m) for m in messages if m.get("role") == "system" and _text(m))
    turns = "".join(_text(m) for m in messages if m.get("role") != "system")
    return f"{system}\n\n{turns}" if system and turns else system or turns


def _text(message: Mapping[str, object]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts: the text ones
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def render_chat(
    template: str | None,
    messages: list[JSONObject],
    *,
    tools: list[JSONObject] | None = None,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    think: bool | str | None = None,
    extra: Mapping[str, object] | None = None,
) -> str:
    """Render ``messages`` with ``template``; the plain text when the model has none."""
    if not template or not template.strip():
        return render_plain(messages)
    variables: dict[str, object] = {
        "messages": _normalise(messages),
        # transformers always defines these two, and templates test ``is none``.
        "tools": tools or None,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    variables.update(think_variables(template, think))
    if extra:
        variables.update(extra)
    return render_jinja(template, variables)


def strip_leading_bos(prompt: str, bos_token: str, add_bos: bool = True) -> str:
    """Drop a BOS the template wrote itself when the tokenizer adds one too (``add_bos``,
    the GGUF's ``add_bos_token``), so the prompt starts with exactly one; when the
    tokenizer adds none, the template's BOS is the only one and stays (as llama.cpp)."""
    if add_bos and bos_token and prompt.startswith(bos_token):
        return prompt[len(bos_token) :]
    return prompt
