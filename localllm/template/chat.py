"""Turn chat messages (and tools) into the prompt text a model was trained on.

The model's own ``tokenizer.chat_template`` (Jinja, from the GGUF) is rendered
with the variables Hugging Face's ``apply_chat_template`` provides.  A GGUF
without a template gets ChatML, which is also what llama.cpp falls back to.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from localllm.template.jinja import render_jinja

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


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
        out.append(msg)
    return out


def render_chat(
    template: str | None,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    think: bool | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """Render ``messages`` with ``template`` (or ChatML when the model has none)."""
    variables: dict[str, Any] = {
        "messages": _normalise(messages),
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    if tools:
        variables["tools"] = tools
    if think is not None:
        variables["enable_thinking"] = think
    if extra:
        variables.update(extra)
    return render_jinja(template or CHATML, variables)


def strip_leading_bos(prompt: str, bos_token: str) -> str:
    """Templates often emit BOS themselves; the tokenizer adds it too, so keep one."""
    if bos_token and prompt.startswith(bos_token):
        return prompt[len(bos_token):]
    return prompt
