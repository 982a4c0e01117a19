"""A request's thinking budget for the engine: the number, and the family's own markers.

The budget itself is the client's (api/thinkbudget.py: ``options.think_budget``,
a ``think`` level, the Modelfile's ``PARAMETER think_budget``); what this module
adds is where a thinking block starts and ends in the reply of the model's
output format, and what closes it when the budget is spent:

* marker formats (``<think>``/``</think>``, ``[THINK]``, ``<seed:think>``,
  Command-R7B's, Gemma 4's channel, Kimi K3's, MiniMax-M3's, Apriel's, and those a
  template is derived to): the format's own tag pair; the end tag closes.  Whether
  the prompt opened the block is read from the rendered prompt, as the output
  parser reads it;
* gpt-oss (harmony): the ``analysis`` channel's message, closed by ``<|end|>`` and
  the header of the ``final`` channel's message, so the model answers there;
* Muse Glimmer: the message ``to=self``, closed by ``<|eom|>`` and the header of a
  message to the user.

A format without reasoning markers (none has fewer than these) gets no budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localllm.api.thinkbudget import effective_budget
from localllm.runner.messages import CompletionRequest
from localllm.toolcalls import ChatFormat, harmony as h, muse as m
from localllm.toolcalls.thinking import prompt_opens_thinking

# Message formats: (what opens the thinking message, what ends it, what closes it early).
_MESSAGES: dict[str, tuple[str, str, str]] = {
    "gpt_oss": (
        f"{h.CHANNEL}analysis{h.MESSAGE}",
        h.END,
        f"{h.END}{h.START}assistant{h.CHANNEL}final{h.MESSAGE}",
    ),
    "muse_glimmer": (f"to=self{h.MESSAGE}", m.EOM, f"{m.EOM}{h.START}assistant to=user{h.MESSAGE}"),
}


def block_markers(fmt: ChatFormat) -> tuple[str, str, str] | None:
    """(open, end, close) of a thinking block in ``fmt``'s replies; None without one."""
    if fmt.name in _MESSAGES:
        return _MESSAGES[fmt.name]
    if fmt.think_tags is None:
        return None
    open_tag, end_tag = fmt.think_tags
    return open_tag, end_tag, end_tag


def apply_budget(
    completion: CompletionRequest,
    fmt: ChatFormat,
    prompt: str,
    values: Mapping[str, Any],
    request_options: Mapping[str, Any] | None,
    level: str | None,
) -> None:
    """Set ``completion``'s budget fields: the effective budget (see
    :func:`~localllm.api.thinkbudget.effective_budget`; ``values`` are the merged
    options) and ``fmt``'s markers, read against the rendered ``prompt``."""
    budget = effective_budget(values, request_options, level)
    marks = block_markers(fmt)
    if budget < 0 or marks is None:
        return
    open_tag, end_tag, _ = marks
    completion.think_budget = budget
    completion.think_open, completion.think_end, completion.think_close = marks
    completion.think_message = values.get("think_budget_message") or ""
    completion.think_opened = (
        fmt.name not in _MESSAGES
        and bool(prompt)
        and prompt_opens_thinking(prompt, open_tag, end_tag)
    )
