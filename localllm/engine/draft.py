"""The draft model of speculative decoding: a small model of the same vocabulary that guesses.

A model created with a Modelfile ``DRAFT`` line loads that GGUF next to it, on
the same devices, with a context of its own holding one sequence per slot.
Each step, every slot whose request drafts (``CompletionRequest.draft_mode ==
"draft"``) hands :meth:`Drafter.propose` the tokens its sequence will hold
once this step's pending token is in; the drafter brings its own copy of that
sequence up to date (dropping what the target rejected last time, evaluating
what is new, all slots in one batch), then guesses greedily, one batched
decode per drafted token, while it is at least ``draft_p_min`` sure.  The
guesses join the target's batch like prompt-lookup drafts (``speculate.py``),
which verifies them: the output is the target's own, whatever the draft says.

Drafting only ever speeds things up or wastes some time: a failed draft decode
drops the drafts of this step and the drafter's cache, never a request.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from localllm.engine.model import Batch, Context, Model, buffer_sizes
from localllm.engine.ngram import MAX_DRAFT
from localllm.engine.plugins import Placement
from localllm.errors import ModelLoadError
from localllm.runner.messages import LoadOptions

log = logging.getLogger(__name__)


@dataclass
class Want:
    """One slot's request for drafts: its sequence, tokens, and how many drafts at most."""

    seq: int
    tokens: Sequence[int]
    room: int
    p_min: float = 0.0
    n_min: int = 0
    drafts: list[int] = field(default_factory=list)
    _next: tuple[int, float] | None = None  # the guess read after the latest decode


class Drafter:
    """The draft model, its context (one sequence per slot) and what each sequence holds."""

    def __init__(
        self,
        path: str,
        target: Model,
        opts: LoadOptions,
        placement: Placement,
        *,
        n_seq: int,
        n_ctx_slot: int,
        n_batch: int,
        n_threads: int,
    ) -> None:
        devices = list(placement["devices"])[:1]
        # All of it beside the target's first offloaded layers, or all in RAM with it.
        self.model = Model(
            [path],
            n_gpu_layers=999 if opts.n_gpu_layers and devices else 0,
            use_mmap=opts.use_mmap,
            devices=devices,
            split_mode="none",
            use_extra_bufts=placement["use_extra_bufts"],
        )
        self.ctx: Context | None = None
        self.batch: Batch | None = None
        try:
            check_vocab(self.model, target)
            self.ctx = Context(
                self.model,
                n_ctx=n_ctx_slot * n_seq,
                n_seq_max=n_seq,
                n_batch=n_batch,
                n_ubatch=min(512, n_batch),
                n_threads=n_threads,
                flash_attn=opts.flash_attn,
                kv_type=opts.kv_type,
            )
            self.batch = Batch(n_batch)
        except BaseException:
            self.close()
            raise
        self.n_batch = n_batch
        self.n_target_vocab = target.n_vocab
        self.cache: list[list[int]] = [[] for _ in range(n_seq)]
        self.load_log = self.model.load_log + self.ctx.load_log

    def memory(self) -> dict[str, dict[str, int]]:
        return buffer_sizes(self.load_log)

    def propose(self, wants: Sequence[Want]) -> None:
        """Fill each want's ``drafts`` (possibly empty); see the module doc."""
        if not wants:
            return
        for w in wants:  # each guess is a draft-model decode and a row of the target's
            w.room = min(w.room, MAX_DRAFT)
        try:
            self._sync(wants)
            self._guess(wants)
        except _DecodeFailed as exc:
            log.warning("draft model: %s; this step goes without drafts", exc)
            for w in wants:
                w.drafts = []
                self._forget(w.seq)
            return
        for w in wants:
            if len(w.drafts) < w.n_min:
                w.drafts = []

    def close(self) -> None:
        for h in ("batch", "ctx", "model"):
            obj = getattr(self, h, None)
            if obj is not None:
                obj.close()

    # ---- internals ------------------------------------------------------------------
    def _sync(self, wants: Sequence[Want]) -> None:
        """Make each sequence hold its tokens (the last one evaluated now, for its logits)."""
        assert self.ctx is not None
        todo: list[tuple[Want, int]] = []  # (want, next index of its tokens to evaluate)
        for w in wants:
            held = self.cache[w.seq]
            n = 0
            top = min(len(held), len(w.tokens) - 1)
            while n < top and held[n] == w.tokens[n]:
                n += 1
            if len(held) > n:
                if not self.ctx.seq_rm(w.seq, n, -1):
                    self._forget(w.seq)
                    n = 0
                del held[n:]
            todo.append((w, n))
        while todo:  # chunks of every sequence's new tokens, n_batch at a time
            batch = self._clear()
            rows: list[tuple[Want, int]] = []
            later: list[tuple[Want, int]] = []
            for w, i in todo:
                chunk = list(w.tokens[i : i + self.n_batch - len(batch)])
                if not chunk:
                    later.append((w, i))
                    continue
                end = i + len(chunk) == len(w.tokens)
                row = batch.add_seq(chunk, len(self.cache[w.seq]), w.seq, end)
                self.cache[w.seq].extend(chunk)
                if end:
                    rows.append((w, row))
                else:
                    later.append((w, i + len(chunk)))
            self._decode(batch)
            for w, row in rows:
                w._next = self._read(row)
            todo = later

    def _guess(self, wants: Sequence[Want]) -> None:
        going = list(wants)
        while going:
            batch = self._clear()
            rows: list[tuple[Want, int]] = []
            for w in going:
                assert w._next is not None
                t, p = w._next
                if p < w.p_min or self.model.is_eog(t) or t >= self.n_target_vocab:
                    continue  # unsure, the end, or a padding id the model lacks
                w.drafts.append(t)
                if len(w.drafts) >= w.room:
                    continue  # the last guess need not be evaluated here
                rows.append((w, batch.add(t, len(self.cache[w.seq]), w.seq, True)))
                self.cache[w.seq].append(t)
            if not rows:
                return
            self._decode(batch)
            for w, row in rows:
                w._next = self._read(row)
            going = [w for w, _ in rows]

    def _clear(self) -> Batch:
        assert self.batch is not None
        self.batch.clear()
        return self.batch

    def _decode(self, batch: Batch) -> None:
        assert self.ctx is not None
        rc = self.ctx.decode(batch)
        if rc != 0:
            raise _DecodeFailed(f"llama_decode returned {rc}")

    def _read(self, row: int) -> tuple[int, float]:
        assert self.ctx is not None
        t, p = self.ctx.greedy(row)
        if t < 0:
            raise _DecodeFailed(f"no logits for output row {row}")
        return t, p

    def _forget(self, seq: int) -> None:
        assert self.ctx is not None
        self.ctx.seq_rm(seq, -1, -1)
        self.cache[seq].clear()


class _DecodeFailed(Exception):
    pass


VOCAB_SLACK = 128  # as llama.cpp: families pad their vocabularies to different sizes


def check_vocab(draft: Model, target: Model) -> None:
    """A draft must speak the target's tokens: within 128 of its size, the same special
    tokens, the same texts (sampled across the vocabulary from id 5, as llama.cpp
    compares; the daemon compares the whole list at create)."""
    why = ""
    n = min(draft.n_vocab, target.n_vocab)
    if abs(draft.n_vocab - target.n_vocab) > VOCAB_SLACK:
        why = f"{draft.n_vocab} tokens against {target.n_vocab}"
    elif (draft.bos, draft.eos) != (target.bos, target.eos):
        why = "different BOS/EOS tokens"
    else:
        for t in range(5, n, max(1, n // 97)):
            if draft.token_text(t) != target.token_text(t):
                why = f"token {t} is {draft.token_text(t)!r} against {target.token_text(t)!r}"
                break
    if why:
        raise ModelLoadError(f"the draft model does not share the model's vocabulary ({why})")
