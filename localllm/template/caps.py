"""What a model's template supports, for ``show``'s capabilities: tools, thinking, insert.

A capability is listed only when the template can carry it.  For a Jinja
template that means the globals it reads (``tools``; a think variable such as
``enable_thinking`` or ``reasoning_effort``) or the markup it writes into history
(``tool_calls``; ``<think>``, ``reasoning_content``); for a Go template (Ollama's) the
fields it names (``.Tools``, ``.Think``/``.Thinking``, ``.Suffix``).  A model
without a template is a base model: completion only.
"""

from __future__ import annotations

from localllm.template.jinja import template_variables
from localllm.template.select import is_jinja

THINK_VARIABLES = frozenset(
    {
        "enable_thinking",
        "thinking",
        "reasoning_effort",
        "thinking_effort",
        "thinking_mode",
        "thinking_budget",
        "reasoning_strength",
    }
)
# Templates that replay a model's reasoning show it in the markup they write.
_THINK_MARKUP = ("<think>", "reasoning_content", "<|START_THINKING|>", "<seed:think>", "[THINK]")


def template_capabilities(template: str) -> list[str]:
    """``tools``, ``insert`` and ``thinking`` (in that order), as far as ``template`` allows."""
    if not template.strip():
        return []
    caps: list[str] = []
    if is_jinja(template):
        reads = template_variables(template)
        if not reads:  # unparseable: judge by the text, as before
            reads = frozenset(v for v in ("tools", *THINK_VARIABLES) if v in template)
        # DeepSeek V3.1 takes no tool list yet writes the calls of its history.
        if "tools" in reads or "tool_calls" in template:
            caps.append("tools")
        if reads & THINK_VARIABLES or any(mark in template for mark in _THINK_MARKUP):
            caps.append("thinking")
        return caps
    if ".Tools" in template:
        caps.append("tools")
    if ".Suffix" in template:
        caps.append("insert")
    if ".Think" in template:  # .Think, .ThinkLevel and .Thinking
        caps.append("thinking")
    return caps
