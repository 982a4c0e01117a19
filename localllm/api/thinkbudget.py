"""The thinking budget as clients say it: one number of tokens, checked, and its levels.

A thinking budget caps the tokens a reasoning model spends inside its thinking
block; when they are spent the engine writes the block's end marker for the
model, which answers from there (engine/thinking.py).  Every way a client can
say it ends up as the option ``think_budget``:

* Ollama: ``options.think_budget`` (an exact count; ``PARAMETER think_budget`` in
  a Modelfile sets the model's default), or a ``think`` level (:data:`LEVELS`);
* OpenAI: ``reasoning_effort`` / ``reasoning.effort`` (:data:`EFFORTS`), and
  llama-server's ``reasoning_budget_tokens`` / ``thinking_budget_tokens``;
* Anthropic: ``thinking.budget_tokens``.

-1 is no limit (the default), 0 no thinking at all (the block is closed before
its first token), N at most N tokens.  The levels follow the budgets Google's
OpenAI-compatible endpoint gives ``reasoning_effort`` (low 1024, medium 8192,
high 24576), with the two efforts it lacks around them.  ``think_budget_message``
(Modelfile or options; llama-server's ``--reasoning-budget-message``) is text
written before the end marker when the budget closes the block, e.g. "Time is up:
answer now."; it is written as plain text, never read as control tokens.

Owned here: the levels, the limits and the checks (a 400 naming the field), and the one
parser of the ``think`` field itself (:func:`parse_think`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localllm.errors import InvalidRequest

UNLIMITED = -1
# No context holds more tokens (api/options.MAX_NUM_CTX): a larger budget is a mistake.
MAX_THINK_BUDGET = 10_000_000
MAX_MESSAGE_CHARS = 2000  # the message is forced into the reply: a sentence, not a prompt

# Ollama's ``think`` levels -> budgets ("max": none).
LEVELS: dict[str, int] = {"low": 1024, "medium": 8192, "high": 24576, "max": UNLIMITED}
# OpenAI's reasoning efforts -> budgets ("none" turns thinking off instead).
EFFORTS: dict[str, int] = {"minimal": 256, **LEVELS, "xhigh": UNLIMITED}


def parse_think(value: bool | str | None) -> bool | str | None:
    """Ollama's ``think``, checked: None (the model's default), a bool, or a level of
    :data:`LEVELS`; text (a flag, a Modelfile) may also say "true" or "false", in any case.
    Every client's way of saying it (``reasoning_effort``, Anthropic's ``thinking``)
    arrives here as one of these."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    if text in LEVELS:
        return text
    raise InvalidRequest(f'invalid think value "{value}": use true, false, low, medium or high')


def check_budget(value: Any, name: str = "think_budget") -> int:
    """``value`` as a budget: an integer from -1 to :data:`MAX_THINK_BUDGET`, else a 400."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be an integer (-1: no limit, 0: no thinking)")
    if not UNLIMITED <= value <= MAX_THINK_BUDGET:
        raise InvalidRequest(
            f"{name} must be between -1 (no limit) and {MAX_THINK_BUDGET}, got {value}"
        )
    return value


def check_message(value: Any, name: str = "think_budget_message") -> str:
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a string")
    if len(value) > MAX_MESSAGE_CHARS:
        raise InvalidRequest(f"{name} must be at most {MAX_MESSAGE_CHARS} characters")
    return value


def check_budget_options(values: Mapping[str, Any]) -> None:
    """400 for a budget or message out of range (``values``: the merged options)."""
    if values["think_budget"] is not None:
        check_budget(values["think_budget"], 'option "think_budget"')
    check_message(values["think_budget_message"], 'option "think_budget_message"')


def effective_budget(
    values: Mapping[str, Any], request_options: Mapping[str, Any] | None, level: str | None
) -> int:
    """The budget a request runs with: its own ``options.think_budget``, else its ``think``
    level's, else the model's ``PARAMETER think_budget``, else no limit."""
    asked = (request_options or {}).get("think_budget")
    if asked is None and level in LEVELS:
        return LEVELS[level]
    budget = values.get("think_budget")
    return UNLIMITED if budget is None else int(budget)
