"""System messages in the middle of a conversation, rendered where the template allows.

Owned here: the rule for a ``system`` message that comes after the first user or
assistant turn (Claude Code sends one right after the first user message; the
OpenAI and Ollama APIs allow them anywhere).  Many chat templates render a
system turn at any place (ChatML, Llama 3); others refuse one after the start
(Gemma's and Mistral's ``raise_exception``) or silently drop it (templates that
read only ``messages[0]``).  So:

1. The conversation is rendered as it is.  When that works and the prompt holds
   every such message's text, it stands.
2. Otherwise each late system message is folded into a user turn and the
   conversation rendered again: appended to the user message right before it
   (after a blank line), else put before the next user message, else appended to
   the leading system message (one is made when there is none).  Its words reach the
   model either way, at or near the place the client put them.

A template that breaks a sandbox limit is not retried: it would break it again.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping

from localllm.api.wire import JSONObject
from localllm.template.goparse import GoTemplateError
from localllm.template.jinja_limits import TemplateError, TemplateLimitError

Messages = list[JSONObject]  # a chat's messages, as the request gave them


def _text(message: Mapping[str, object]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def late_system(messages: Messages) -> list[int]:
    """Indexes of the system messages after the first non-system one."""
    start = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    return [i for i in range(start, len(messages)) if messages[i].get("role") == "system"]


def fold_system(messages: Messages) -> Messages:
    """``messages`` with each late system message folded into a user turn (module rule 2)."""
    late = set(late_system(messages))
    out: Messages = [copy.copy(m) for m in messages]
    pending: list[str] = []  # late system texts waiting for the next user message
    kept: Messages = []
    for i, msg in enumerate(out):
        if i in late:
            if kept and kept[-1].get("role") == "user":
                kept[-1]["content"] = _join(_text(kept[-1]), _text(msg))
            else:
                pending.append(_text(msg))
            continue
        if msg.get("role") == "user" and pending:
            msg["content"] = _join(*pending, _text(msg))
            pending.clear()
        kept.append(msg)
    if pending:  # no user message after them: into the leading system message
        if kept and kept[0].get("role") == "system":
            kept[0]["content"] = _join(_text(kept[0]), *pending)
        else:
            kept.insert(0, {"role": "system", "content": _join(*pending)})
    return kept


def _join(*parts: str) -> str:
    return "\n\n".join(p for p in parts if p)


def render_placed(render: Callable[[Messages], str], messages: Messages) -> str:
    """``render(messages)`` with late system messages kept in place or folded (see above)."""
    late = late_system(messages)
    if not late:
        return render(messages)
    try:
        prompt = render(messages)
    except TemplateLimitError:
        raise
    except (TemplateError, GoTemplateError):
        prompt = None
    if prompt is not None and all(_text(messages[i]) in prompt for i in late):
        return prompt
    return render(fold_system(messages))
