"""Anthropic's thinking controls -> the native ``think`` and ``options.think_budget``.

Owned here: ``thinking`` (``enabled`` with ``budget_tokens``, ``adaptive``,
``disabled``; ``display``), ``output_config.effort`` and the
``clear_thinking_*`` edits of ``context_management``.  The rules:

- ``enabled`` and ``adaptive`` turn thinking on, ``disabled`` off; no
  ``thinking`` leaves the model's own default.
- ``budget_tokens`` (``enabled`` only) is the thinking budget
  (``options.think_budget``, api/thinkbudget.py).  Unlike Anthropic's API any
  budget from 0 up is taken, and -1 for none, and it need not be below ``max_tokens``.
- ``output_config.effort`` (``low``, ``medium``, ``high``, ``xhigh``, ``max``) is the
  think level, with that level's budget, while thinking is on and no
  ``budget_tokens`` was given; with thinking off or left to the model it changes
  nothing, since a local model has no other dial for it.
- ``display: "omitted"`` is honoured: thinking blocks come back with empty text.
- ``context_management.edits``: ``clear_thinking_*`` drops the thinking of all but
  the last ``keep`` assistant turns before the prompt is rendered (``keep``
  ``"all"`` drops none; Anthropic's default keeps one turn).  Other edits
  (``clear_tool_uses_*``) are ignored and named in :attr:`Thinking.ignored`,
  for the route's log line: the agent sends the whole history either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from localllm.api.bodies import ChatMessage
from localllm.api.thinkbudget import EFFORTS, check_budget
from localllm.compat.anthropic.types import ContextEdit, MessagesRequest
from localllm.errors import InvalidRequest

# Anthropic's efforts -> the native think level (whose budget comes with it) and, for
# the efforts Ollama has no level for, an explicit budget.
_LEVEL = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "max"}


@dataclass
class Thinking:
    think: bool | str | None = None  # the native ``think``
    budget: int | None = None  # options.think_budget, when the request sets one
    omit: bool = False  # ``display: "omitted"``: thinking text is not returned
    ignored: list[str] = field(default_factory=list)  # what the route logs as ignored


def _effort(body: MessagesRequest) -> str | None:
    config = body.get("output_config")
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise InvalidRequest("output_config: must be an object")
    effort = config.get("effort")
    if effort is not None and effort not in _LEVEL:
        raise InvalidRequest(
            f"output_config.effort: must be one of {', '.join(_LEVEL)}, got {effort!r}"
        )
    return effort


def thinking(body: MessagesRequest) -> Thinking:
    """The request's thinking controls (see the module docstring)."""
    raw = body.get("thinking")
    effort = _effort(body)
    if raw is None:
        return Thinking()
    kind = raw.get("type") if isinstance(raw, Mapping) else None
    if kind not in ("enabled", "adaptive", "disabled"):
        raise InvalidRequest("thinking: type must be enabled, adaptive or disabled")
    assert isinstance(raw, Mapping)
    display = raw.get("display")
    if display not in (None, "summarized", "omitted"):
        raise InvalidRequest('thinking.display: must be "summarized" or "omitted"')
    out = Thinking(think=kind != "disabled", omit=display == "omitted")
    if kind == "disabled":
        return out
    if kind == "enabled" and raw.get("budget_tokens") is not None:
        out.budget = check_budget(raw["budget_tokens"], "thinking.budget_tokens")
    elif effort is not None:
        out.think = _LEVEL[effort]
        if effort not in ("low", "medium", "high", "max"):
            out.budget = EFFORTS[effort]
    return out


def _keep(edit: ContextEdit, where: str) -> int | None:
    """How many assistant turns keep their thinking (None: all)."""
    keep: object = edit.get("keep", {"type": "thinking_turns", "value": 1})
    if keep == "all":
        return None
    value = keep.get("value") if isinstance(keep, Mapping) else None
    if (
        not isinstance(keep, Mapping)
        or keep.get("type") != "thinking_turns"
        or isinstance(value, bool)
        or not isinstance(value, int)
        or value < 0
    ):
        raise InvalidRequest(
            f'{where}.keep: must be "all" or {{"type": "thinking_turns", "value": N}}'
        )
    return value


def context_edits(body: MessagesRequest, messages: list[ChatMessage], out: Thinking) -> None:
    """Apply ``context_management.edits`` to the native ``messages`` (in place)."""
    config = body.get("context_management")
    if config is None:
        return
    edits = config.get("edits") if isinstance(config, Mapping) else None
    if not isinstance(edits, list):
        raise InvalidRequest("context_management.edits: must be an array")
    for i, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, Mapping) else None
        if not isinstance(kind, str):
            raise InvalidRequest(f"context_management.edits.{i}: needs a type")
        assert isinstance(edit, Mapping)
        if not kind.startswith("clear_thinking_"):
            out.ignored.append(f"context_management.edits.{i} ({kind})")
            continue
        keep = _keep(edit, f"context_management.edits.{i}")
        if keep is None:
            continue
        turns = [m for m in messages if m.get("role") == "assistant" and m.get("thinking")]
        for msg in turns[: max(len(turns) - keep, 0)]:
            del msg["thinking"]
