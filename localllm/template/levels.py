"""Think levels: Ollama's ``think`` (true, false, "low", "medium", "high", "max") as the
variables each chat-template family reads.

There is no common name: Qwen3, GLM, Gemma 4 and SmolLM3 read ``enable_thinking``;
DeepSeek V3.1+, Granite 3.3 and Kimi K3 read ``thinking``; gpt-oss, Cohere, Tencent
Hy3 and Solar read ``reasoning_effort`` (with their own words for "off"); Kimi K3
reads ``thinking_effort``, MiniMax M3 ``thinking_mode``, Seed-OSS a token budget.
Each variable is set only when the template reads it (its undeclared globals), so
a template's own default stays in force for everything the request did not say.
"""

from __future__ import annotations

from localllm.api.thinkbudget import parse_think
from localllm.template.jinja import template_variables

__all__ = ["parse_think", "think_variables"]  # parse_think: api/thinkbudget.py's, checked here

# Seed-OSS counts its thinking in tokens; -1 is "no limit".
_BUDGETS = {"low": 1024, "medium": 4096, "high": -1, "max": -1}


def think_variables(source: str, think: bool | str | None) -> dict[str, bool | int | str]:
    """The template variables that carry ``think`` for the template ``source``."""
    think = parse_think(think)
    if think is None:
        return {}
    reads = template_variables(source)
    on = think is not False
    level = think if isinstance(think, str) else None
    out: dict[str, bool | int | str] = {}
    if "enable_thinking" in reads:
        out["enable_thinking"] = on
    if "thinking" in reads:
        out["thinking"] = on
    if "reasoning_effort" in reads:
        effort = _effort(source, on, level)
        if effort is not None:
            out["reasoning_effort"] = effort
    if "thinking_effort" in reads and level:
        # Kimi K3 knows low, high and max.
        out["thinking_effort"] = "high" if level == "medium" else level
    if "thinking_mode" in reads:
        out["thinking_mode"] = "enabled" if on else "disabled"
    if "thinking_budget" in reads and (level or not on):
        out["thinking_budget"] = _BUDGETS[level] if level else 0
    if "reasoning_strength" in reads and level:
        out["reasoning_strength"] = level
    return out


def _effort(source: str, on: bool, level: str | None) -> str | None:
    """``reasoning_effort``: the level itself; "off" in the family's own word."""
    if not on:
        if "no_think" in source:  # Tencent Hy3
            return "no_think"
        if '"none"' in source or "'none'" in source:  # Cohere 2
            return "none"
        if "minimal" in source:  # Solar Open
            return "minimal"
        # gpt-oss cannot switch reasoning off; its lowest effort is the nearest.
        return "low"
    if level is not None:
        if "no_think" in source:  # Hy3 knows no_think, low and high
            return "low" if level == "low" else "high"
        if level == "max" and "'max'" not in source and '"max"' not in source:
            return "high"  # gpt-oss and most others stop at high
        return level
    if "no_think" in source:
        return "high"  # Hy3 defaults to no thinking, so plain ``think: true`` must say so
    return None  # the template's default effort (gpt-oss: medium)
