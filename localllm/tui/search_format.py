"""What the model search of the TUI shows, as plain text: counts, dates, the fit of a quant
(``GET /api/search``'s ``fit`` objects, shape in docs/api.md) and the daemon's refusal of a
pull too big for its machine.

Kept free of Textual so it is cheap to import and easy to test; the screen
(``screens/search.py``) only adds colours.  Everything here reads the daemon's JSON
defensively: a field of the wrong type shows as ``-``, never as a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from localllm.format import format_bytes

_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})")
# The daemon's wording of a pull refused for its size (models/remote.preflight): a streamed
# pull reports errors as Ollama does, ``{"error": "text"}`` with no status, so the text is
# all a client has.  tests/tui/test_search_flow.py holds the real daemon to it.
_REFUSED = "does not fit on this machine"
_HOW_TO_FORCE = "; to pull it anyway"


def as_int(value: object) -> int:
    """An integer field, 0 when missing or not a number (bools are not counts)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value)


def as_dict(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def updated(text: Any) -> str:
    """The day of an RFC 3339 time (``2025-05-01``): a date, unlike "3 months ago", reads
    the same tomorrow."""
    m = _DATE.match(text) if isinstance(text, str) else None
    return m.group(1) if m else "-"


def capabilities(model: Mapping[str, Any]) -> str:
    caps = model.get("capabilities")
    return ", ".join(str(c) for c in caps) if isinstance(caps, list) and caps else "-"


def pull_name(model: Mapping[str, Any], quant: Mapping[str, Any]) -> str:
    """The name that pulls ``quant`` of ``model``: ``hf.co/user/repo:TAG``."""
    return f"{model.get('name', '')}:{quant.get('tag', '')}"


# A fit is typed ``wire.FitResult``; these read it as a plain mapping because they
# check every field's type themselves.
Fit = Mapping[str, object]


def fit_of(quant: Mapping[str, object]) -> Fit:
    """The ``fit`` of a search quant or a dry run (empty when there is none)."""
    return as_dict(quant.get("fit"))


def fit_status(fit: Fit) -> str:
    status = fit.get("status")
    return status if status in ("gpu", "partial", "cpu", "too_big") else "unknown"


def fit_summary(fit: Fit) -> str:
    """``all 29 layers on GPU``, ``22/29 layers on GPU``, ``CPU only``, ``too big``,
    ``unknown``: the planner's verdict as the daemon words it."""
    summary = fit.get("summary")
    if fit_status(fit) == "unknown" or not isinstance(summary, str) or not summary:
        return "unknown"
    return summary


def memory_total(fit: Fit) -> int:
    return sum(as_int(v) for v in as_dict(fit.get("memory")).values())


def memory_text(fit: Fit) -> str:
    """``1.4 GB at 4096 tokens``: what a load would take, all devices together."""
    total = memory_total(fit)
    if not total:
        return "-"
    context = as_int(fit.get("context"))
    return f"{format_bytes(total)} at {context} tokens" if context else format_bytes(total)


def fit_line(fit: Fit) -> str:
    """The highlighted quant's fit in full: memory per device, then the planner's reason.

    ``CUDA0 5.1 GB · RAM 1.2 GB at 8192 tokens — 29/29 layers on CUDA0 ...``
    """
    status, reason = fit_status(fit), fit.get("reason")
    reason = reason if isinstance(reason, str) else ""
    if status == "unknown":
        return f"fit unknown: {reason}" if reason else "fit unknown"
    if status == "too_big":
        # The planner's line ends "... does not fit: needs 30.2 GiB of RAM, 20.8 GiB available".
        return "too big: " + (
            reason.split("does not fit: ", 1)[-1] if reason else f"needs {memory_text(fit)}"
        )
    parts = [
        f"{'RAM' if dev == 'CPU' else dev} {format_bytes(as_int(n))}"
        for dev, n in as_dict(fit.get("memory")).items()
        if as_int(n)
    ]
    line = " · ".join(parts)
    if as_int(fit.get("context")):
        line += f" at {as_int(fit['context'])} tokens"
    return f"{line} — {reason}" if reason and line else (line or reason)


def refusal(message: str) -> str | None:
    """The reason when ``message`` is the daemon refusing a pull for its size, else None.

    The CLI's advice on how to pull anyway (``localllm pull NAME --force``) is cut:
    the TUI offers its own key for that.
    """
    if _REFUSED not in message:
        return None
    return message.split(_HOW_TO_FORCE, 1)[0].strip()
