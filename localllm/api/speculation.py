"""Speculative decoding options: who drafts (``speculative``) and how much (``draft_*``).

``speculative`` is ``"off"``, ``"ngram"`` (prompt lookup: drafts copied from
what followed an earlier occurrence of the recent tokens), ``"auto"`` (prompt
lookup only where it pays: greedy requests whose text offers matches, given up
for a request after a run of rejected drafts; engine/speculate.py) or
``"draft"`` (the model's draft model, Modelfile ``DRAFT``, proposes them).
Unset, it is ``"draft"`` for a model with a draft model, since whoever added
the DRAFT line asked for it, and ``"auto"`` otherwise.  Output is the same
whichever is used: every kept token is the one the model itself picks there.

``draft_max`` caps the drafted tokens per step (``draft_num_predict`` is its
older name; ``draft_max`` wins when both are set), ``draft_min`` is the fewest
drafted tokens worth verifying and ``draft_p_min`` the draft model's confidence
below which it stops drafting.  Unset (or ``draft_max`` 0) they take the
mode's defaults: 16, 0, 0 for lookup, auto or not (a probability means nothing
there), and 16, 0, 0.75 for a draft model (llama.cpp's long-standing draft
defaults; the pinned llama-server's CLI now defaults to 3 and 0).  16 is a
ceiling, not a rate: the engine drafts about twice the recently accepted run
(engine/speculate.py), so a draft that keeps missing costs a row or two a step,
not sixteen; bench/spec_bench.py measured copying code at 1.59x with 16 against
1.40x with 8.

``draft_max``, ``draft_num_predict`` and ``draft_min`` are at most
``MAX_DRAFT_TOKENS`` (64), and at most one less than ``num_batch`` (the
micro-batch: a step's token and its drafts then fit in one), a 400 naming the
option past that: every drafted token is a row of the shared batch and of the
logits, so one request asking for 2,048 filled each step's batch with its
guesses.  64 is llama.cpp's largest default (its prompt lookup's, ``n_max`` of
``--spec-default``; a draft model's is 3), and its server sizes a sequence's
output rows as ``1 + n_max``, at most ``n_batch``.  The engine holds every draft
to the same 64 (engine/ngram.py) and cuts it to the batch and context room each
step (engine/speculate.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from localllm.errors import InvalidRequest

SPECULATIVE_MODES = ("off", "auto", "ngram", "draft")
DEFAULT_DRAFT_TOKENS = 16  # most drafted tokens per step when draft_max is unset
# The most drafted tokens a request may ask for per step (see the module doc); the
# engine's own ceiling is engine/ngram.py's MAX_DRAFT, the same number.
MAX_DRAFT_TOKENS = 64
# Per mode: (draft_max, draft_min, draft_p_min) when the options leave them unset.
MODE_DEFAULTS: dict[str, tuple[int, int, float]] = {
    "ngram": (DEFAULT_DRAFT_TOKENS, 0, 0.0),
    "auto": (DEFAULT_DRAFT_TOKENS, 0, 0.0),
    "draft": (DEFAULT_DRAFT_TOKENS, 0, 0.75),  # draft_max, draft_min, draft_p_min
}


@dataclass(frozen=True)
class Speculation:
    """What a request's completion asks of the runner's drafting."""

    mode: Literal["off", "auto", "ngram", "draft"] = "off"
    tokens: int = 0  # drafted tokens per step; 0 with mode "off"
    min: int = 0
    p_min: float = 0.0


def check_speculation(values: Mapping[str, Any]) -> None:
    """400 for a value no mode can use (``values``: the merged options)."""

    def bad(key: str, why: str) -> InvalidRequest:
        return InvalidRequest(f'option "{key}" {why}, got {values[key]!r}')

    mode = values["speculative"]
    if mode is not None and mode not in SPECULATIVE_MODES:
        raise bad("speculative", 'must be "off", "auto", "ngram" or "draft"')
    top = draft_limit(values)
    for key in ("draft_max", "draft_num_predict", "draft_min"):
        if values[key] is not None and values[key] < 0:
            raise bad(key, "must be >= 0")
        if values[key] is not None and values[key] > top:
            why = "" if top == MAX_DRAFT_TOKENS else f" with num_batch {values['num_batch']}"
            raise bad(key, f"must be between 0 and {top}{why}")
    p_min = values["draft_p_min"]
    if p_min is not None and not 0.0 <= p_min <= 1.0:
        raise bad("draft_p_min", "must be between 0 and 1")


def draft_limit(values: Mapping[str, Any]) -> int:
    """The most drafted tokens a step of a request with these options may verify."""
    batch: int = values["num_batch"]
    return max(0, min(MAX_DRAFT_TOKENS, batch - 1))


def speculation(values: Mapping[str, Any], *, has_draft: bool) -> Speculation:
    """The effective speculation of checked option ``values`` for a model that has a
    draft model or not (a request for ``"draft"`` without one: see ``require_draft``)."""
    asked = values["speculative"] or ("draft" if has_draft else "auto")
    if asked == "off":
        return Speculation()
    mode: Literal["auto", "ngram", "draft"] = (
        "draft" if asked == "draft" else "auto" if asked == "auto" else "ngram"
    )
    tokens, low, p_min = MODE_DEFAULTS[mode]
    # A mode's default is cut to a small num_batch; set values were checked against it.
    tokens = min(values["draft_max"] or values["draft_num_predict"] or tokens, draft_limit(values))
    if values["draft_min"] is not None:
        low = values["draft_min"]
    if values["draft_p_min"] is not None:
        p_min = values["draft_p_min"]
    # As llama-server: a minimum above the maximum is the maximum.
    return Speculation(mode, tokens, min(low, tokens), p_min)


def require_draft(spec: Speculation, *, has_draft: bool, model: str) -> None:
    """400 for ``speculative: "draft"`` on a model without a draft model."""
    if spec.mode == "draft" and not has_draft:
        raise InvalidRequest(
            f'model "{model}" has no draft model (add a DRAFT line to its Modelfile)'
        )
