"""Where a chat prompt's shared head ends: the part every conversation of an app repeats.

An agent sends the same system prompt and tools at the start of every session, then
its own first message.  The engine keeps a copy of the cells at the end of that head
on a sliding-window model (engine/checkpoints.py), so the next session reuses it,
after a restart too; it needs to know where the head ends, in the prompt's text.

The head is found by rendering the same system messages and tools with another first
user message and taking what the two renderings share: whatever the template writes
around the turns, the text before the first user message's content is the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from localllm.errors import LocalLLMError

if TYPE_CHECKING:
    from localllm.api.wire import JSONObject
    from localllm.inference.service import InferenceService, Target

HEAD_MIN = 256  # characters: fewer make fewer tokens than the disk cache's shortest copy
_PROBES = ("\u2063?", "\u2063!")  # a first message no user sends


def shared_head(
    svc: InferenceService,
    target: Target,
    messages: list[dict[str, Any]],
    prompt: str,
    *,
    tools: list[JSONObject] | None = None,
    think: bool | str | None = None,
) -> int:
    """How many leading characters of ``prompt`` (``messages`` rendered) a conversation
    with the same system messages and tools starts with (0: none worth a copy).

    Only for a sliding-window model, where the engine keeps such copies, and a long
    enough prompt: the second rendering costs a template run."""
    arch = target.info.architecture
    if not target.info.kv.get(f"{arch}.attention.sliding_window") or len(prompt) < HEAD_MIN:
        return 0
    lead = 0
    while lead < len(messages) and messages[lead].get("role") == "system":
        lead += 1
    if not lead and not tools:
        return 0
    first = messages[lead].get("content") if lead < len(messages) else None
    probe = _PROBES[1] if first == _PROBES[0] else _PROBES[0]
    try:
        other = svc.render(
            target, [*messages[:lead], {"role": "user", "content": probe}], tools=tools, think=think
        )
    except LocalLLMError:
        return 0  # a template that wants more than a head: no checkpoint
    n = 0
    for a, b in zip(prompt, other, strict=False):
        if a != b:
            break
        n += 1
    return n if n >= HEAD_MIN else 0
