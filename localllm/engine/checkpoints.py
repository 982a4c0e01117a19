"""Copies kept while a prompt is evaluated, so that a prompt branching off it reuses them.

A copy taken when a request ends (park.py) holds the prompt and the reply.  On a
model without a sliding window any prompt sharing a prefix with it takes those
cells back.  On a sliding-window model (Gemma 3) a copy serves only a prompt that
continues it whole (parked.py), so a new conversation that sends the same system
prompt and tools with another first message, which is what an agent's next session
does, could reuse nothing, even after a restart.

So on such a model, with a disk tier, a prompt's prefill keeps copies at:
- the end of its shared head: the system prompt and tools, which the daemon finds
  from the chat template (``CompletionRequest.cache_head``, in characters);
- the point where it branches off a copy or a slot it shares a prefix with but
  does not continue (the longest prefix earlier requests shared: raw prompts too);
- its end, before the reply (a retry or a second sample of the same prompt).

Prompt chunks end at those marks (batching.py); after the step that reaches one (or
at admission, for a mark where the prompt's reused cells end),
``PromptCache.keep`` copies the slot's cells to host memory and the disk writer, as
for any parked copy (same budget, least recently used first).  A mark that a copy
already serves, or shorter than ``diskcache.MIN_TOKENS``, is skipped: a system
prompt that every conversation repeats costs one copy, not one per request.
Copying the cells takes the engine a moment (``llama_state_seq_get_data``: memory
bandwidth over the prefix's cells), less than evaluating them again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from localllm.engine.diskcache import MIN_TOKENS
from localllm.engine.slots import Slot, common_prefix, prompt_tokens

if TYPE_CHECKING:
    from localllm.engine.model import Model
    from localllm.engine.park import PromptCache
    from localllm.runner.messages import CompletionRequest


def wanted(parked: PromptCache | None) -> bool:
    """Whether this engine keeps checkpoints: a sliding window and a disk tier."""
    return parked is not None and parked.n_swa > 0 and parked.disk is not None


def head_length(
    parked: PromptCache | None, model: Model, req: CompletionRequest, tokens: list[int], n_ctx: int
) -> int:
    """The tokens of ``tokens`` that ``req.cache_head`` characters of its text make (0
    where no checkpoint is kept)."""
    if not wanted(parked) or req.cache_head <= 0 or not isinstance(req.prompt, str):
        return 0
    if req.images:
        return 0
    head = prompt_tokens(model, replace(req, prompt=req.prompt[: req.cache_head]), n_ctx)
    # A token may straddle the cut: only what both tokenizations agree on is the head.
    return common_prefix(head, tokens)


def marks(
    parked: PromptCache | None,
    slots: Sequence[Slot],
    prompt: list[int],
    adapters: tuple[str, ...],
    start: int,
    head: int,
) -> list[int]:
    """The prompt lengths from ``start`` on at which its prefill keeps a copy, in order.

    A mark at ``start`` itself (the prompt reuses a slot's cells up to where it parts
    from them) is kept at once, before the slot's old cells are overwritten."""
    if parked is None or not wanted(parked):
        return []
    found = {len(prompt), head, _branch(parked, slots, prompt, adapters)}
    out = []
    for m in sorted(found):
        if m < start or m < MIN_TOKENS or m > len(prompt):
            continue
        part = prompt[:m]
        here = parked.best(part, adapters)
        far = parked.disk.best(part, adapters) if parked.disk is not None else None
        if (here is not None and here[1] >= m) or (far is not None and far[1] >= m):
            continue  # a copy serves it already
        out.append(m)
    return out


def _branch(
    parked: PromptCache, slots: Sequence[Slot], prompt: list[int], adapters: tuple[str, ...]
) -> int:
    """The longest prefix ``prompt`` shares with a copy or slot that it leaves before
    that one's end: where conversations of one app part ways (0: none)."""
    held: list[list[int]] = [e.tokens for e in parked.entries if e.adapters == adapters]
    if parked.disk is not None:
        held += parked.disk.token_lists(adapters)
    held += [s.cache for s in slots if s.adapters == adapters and s.cache]
    best = 0
    for tokens in held:
        n = common_prefix(tokens, prompt)
        if n < len(tokens) and n < len(prompt):
            best = max(best, n)
    return best


def reached(parked: PromptCache | None, slot: Slot) -> None:
    """After a step: keep a copy if the slot's prefill has just reached its next mark."""
    a = slot.active
    if parked is None or a is None or not a.marks or a.n_past < a.marks[0]:
        return
    while a.marks and a.marks[0] <= a.n_past:
        a.marks.pop(0)
    parked.keep(slot)
