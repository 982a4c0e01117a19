"""Slots (one KV sequence each), the request state that occupies them, and what fits in one.

A slot remembers which tokens its sequence holds in the KV cache (``cache``,
one key per cell) and where those cells sit (``pos``, see positions.py: after an
M-RoPE image the next position is not the cell count); a new request goes to
the free slot sharing the longest prefix with its prompt, so only the rest is
evaluated.  Prompt checks, truncation on overflow and ``cut`` (dropping a slot's
cells from an index on) live here too, so the rules for what a slot holds sit in
one place.

A leaf of the engine: every module that reads or edits a slot imports this one,
and it imports none of them (batching.py builds a step's batch from the slots).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from localllm.engine.positions import Positions
from localllm.engine.tokenize import slot_tokens
from localllm.errors import InvalidRequest

if TYPE_CHECKING:
    from localllm.engine.model import Context, Model
    from localllm.engine.ngram import NgramIndex
    from localllm.engine.sampling import Sampler
    from localllm.engine.text import TextStream
    from localllm.engine.thinking import ThinkBudget
    from localllm.runner.messages import CompletionRequest

OVERFLOW = "the input length exceeds the context length"


@dataclass
class Active:
    """A request being served: prompt progress, sampler, text state, timings."""

    req: CompletionRequest
    prompt: list[int]
    sampler: Sampler
    text: TextStream
    n_past: int = 0  # prompt tokens in the KV cache (cached + evaluated)
    cached: int = 0  # prompt tokens reused from the cache
    pending: int = -1  # last sampled token, evaluated at the next step
    generated: list[int] = field(default_factory=list)
    prompt_ns: int = 0
    eval_ns: int = 0
    cancelled: bool = False
    adapters: tuple[str, ...] = ()  # the LoRA set every decode of this request needs
    last_step: int = 0  # the engine step that last advanced it (adapter scheduling)
    keep: frozenset[int] = frozenset()  # control tokens rendered as text (the request's markers)
    media: Any = None  # vision.Media: the prompt's images (their keys are negative)
    ngram: NgramIndex | None = None  # prompt + output, when this request speculates
    drafts: list[int] = field(default_factory=list)  # this step's drafted tokens
    draft_rows: list[int] = field(default_factory=list)  # their output rows in the batch
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0  # drafting steps that ended on a drafted token the model disagreed with
    draft_run: float = -1.0  # drafted tokens accepted per step, averaged (speculate.py)
    think: ThinkBudget | None = None  # the request's thinking budget (thinking.py)
    # Tokens the reply holds but the KV cache not yet: a thinking block's forced close,
    # decoded like a prompt chunk at the next step (batching.py).
    forced: list[int] = field(default_factory=list)
    # Prompt lengths at which a copy of the cells is kept (park.py's checkpoints), in
    # order: the prompt is cut into chunks that end there.
    marks: list[int] = field(default_factory=list)

    @property
    def prefilling(self) -> bool:
        return self.n_past < len(self.prompt)


@dataclass
class Slot:
    """One sequence id of the llama context and the tokens it holds."""

    seq: int
    cache: list[int] = field(default_factory=list)
    pos: Positions = field(default_factory=Positions)  # the cells' positions, the next one
    adapters: tuple[str, ...] = ()  # the LoRA set the cached tokens were computed under
    active: Active | None = None
    logits_index: int = -1  # this step's output row, -1 if none
    # Cells from this index on were computed beside tokens a context shift dropped, so
    # another prompt must not reuse them (-1: every cell is exact).
    exact: int = -1

    def reusable(self, common: int) -> int:
        """``common`` leading cells, limited to those another prompt may reuse."""
        return common if self.exact < 0 else min(common, self.exact)

    @property
    def free(self) -> bool:
        return self.active is None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def pick_slot(
    slots: Sequence[Slot], prompt: Sequence[int], adapters: tuple[str, ...] = ()
) -> tuple[Slot, int] | None:
    """The free slot with the longest common prefix (ties: the least filled), and that prefix.

    A cache computed under another adapter set shares no prefix: its keys and values differ.
    """
    best: tuple[Slot, int] | None = None
    for s in slots:
        if not s.free:
            continue
        n = s.reusable(common_prefix(s.cache, prompt)) if s.adapters == adapters else 0
        if best is None or n > best[1] or (n == best[1] and len(s.cache) < len(best[0].cache)):
            best = (s, n)
    return best


def cut(ctx: Context, slot: Slot, n: int) -> int:
    """Drop the slot's cells from ``n`` on (from the start of an image ``n`` is inside);
    returns the cells kept.  A memory that cannot cut mid-sequence is emptied."""
    kept, p = slot.pos.truncate(n)
    if p is not None and not ctx.seq_rm(slot.seq, p, -1):
        ctx.seq_rm(slot.seq, -1, -1)
        slot.pos.clear()
        kept = 0
    del slot.cache[kept:]
    if 0 <= slot.exact and kept <= slot.exact:
        slot.exact = -1  # what is left was computed in its own context
    return kept


def fit_prompt(tokens: list[int], n_ctx: int, num_keep: int) -> list[int]:
    """Shorten a prompt that does not fit a slot: keep ``num_keep`` head tokens and
    the tail, dropping enough of the middle to leave half the rest for generation
    (like llama.cpp's server, so a long chat does not hit the limit every turn)."""
    if len(tokens) < n_ctx:
        return tokens
    keep = max(0, min(num_keep, n_ctx // 2))
    tail = max(1, (n_ctx - keep) // 2)
    return tokens[:keep] + tokens[-tail:]


def prompt_tokens(model: Model, req: CompletionRequest, n_ctx_slot: int) -> list[int]:
    """A request's prompt as checked token ids, shortened to fit a slot if it may be."""
    if isinstance(req.prompt, str):
        # Read no further than the slot needs (a text can be far longer than the context).
        tokens, _ = slot_tokens(
            model.tokenize_bytes,
            req.prompt,
            req.add_special,
            req.parse_special,
            n_ctx_slot,
            req.num_keep if req.truncate else None,
        )
    else:
        tokens = [int(t) for t in req.prompt]
        if any(t < 0 or t >= model.n_vocab for t in tokens):
            raise InvalidRequest("prompt contains a token id outside the vocabulary")
    if not tokens:
        raise InvalidRequest("the prompt is empty")
    if len(tokens) >= n_ctx_slot:
        if not req.truncate:
            # The counts, in the words Anthropic's API uses: Claude Code reads them to
            # compact its conversation by the difference (compat/anthropic/errors.py).
            raise InvalidRequest(f"{OVERFLOW} ({len(tokens)} tokens > {n_ctx_slot - 1} maximum)")
        tokens = fit_prompt(tokens, n_ctx_slot, req.num_keep)
    return tokens
