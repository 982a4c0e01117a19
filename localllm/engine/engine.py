"""The engine: one loaded model, its slots, and the continuous-batching step loop.

Runs inside the runner child (the daemon never imports it).  ``submit`` queues
a request; every ``step`` admits queued requests into free slots (reusing the
longest cached prefix), builds ONE batch holding the next token of every
decoding slot plus a chunk of pending prompt tokens (bounded by n_batch; see
``batching.py``), calls ``llama_decode`` once, samples each slot with its own
chain and returns the events.  Finished requests leave their slot at once; the
slot keeps its KV contents for the next request that shares the prefix (the
slots and what fits in one: ``slots.py``).  Requests may name LoRA adapters; a
step then serves one adapter set (see ``adapters.py``).  Prompts with images (a
projector loaded) add one image chunk per step (see ``vision.py``).

The helpers take what they work on (context, slots, projector) and, where they
hand a slot back, the engine's own steps (``take``, ``_sample``, ``_fail``): none
of them imports this module, so the engine's modules import in one direction.
"""

from __future__ import annotations

import time
from collections import deque

from localllm.engine.adapters import Adapters, AdapterSet
from localllm.engine.batching import fill_batch
from localllm.engine.budget import StepCost, prompt_budget
from localllm.engine.checkpoints import head_length, marks, reached
from localllm.engine.device_sampling import SlotChains
from localllm.engine.diskcache import open_disk
from localllm.engine.draftcost import DraftCost
from localllm.engine.load import EngineInfo, engine_info, load, memory_report
from localllm.engine.model import buffer_sizes
from localllm.engine.park import PromptCache, budget
from localllm.engine.sharing import holds, share_prefixes
from localllm.engine.shift import shift
from localllm.engine.slots import OVERFLOW, Active, Slot, cut, pick_slot, prompt_tokens
from localllm.engine.speculate import speculation, verify
from localllm.engine.text import TextStream
from localllm.engine.thinking import think_budget
from localllm.engine.vision import Media, image_step, media_prompt
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.hardware.cpu import default_threads
from localllm.runner.messages import (
    CompletionRequest,
    Done,
    Event,
    Failed,
    LoadOptions,
    PairFormat,
    Piece,
)

__all__ = ["OVERFLOW", "Engine", "default_threads"]


class Engine:
    """One model in one llama context with ``n_parallel`` slots (see module doc).

    Not thread-safe: the runner calls every method from its one engine thread.
    """

    def __init__(self, model_paths: list[str], opts: LoadOptions) -> None:
        self.opts = opts
        self.loaded = loaded = load(model_paths, opts)
        self.model, self.ctx, self.batch = loaded.model, loaded.ctx, loaded.batch
        self.projector, self.drafter = loaded.projector, loaded.drafter
        self.n_ctx_slot, self.n_batch, self.n_ubatch = (
            loaded.n_ctx_slot,
            loaded.n_batch,
            loaded.n_ubatch,
        )
        self.cost = StepCost(self.n_ubatch)
        # What a draft row costs this batch (draftcost.py), for the default speculation.
        self.draft_cost = DraftCost() if opts.draft_gate else None
        self._budget = prompt_budget(opts.step_tokens, opts.step_ms, self.cost)
        # Context shift (engine/shift.py) needs movable cells and no sliding window.
        self.can_shift = self.ctx.can_shift() and self.model.n_swa == 0
        self.slots = [Slot(i) for i in range(max(1, opts.n_parallel))]
        self.adapters = Adapters(self.model, self.ctx)
        self._steps = 0
        # Requests waiting for a slot: tokens, adapter set, images, shared head (submit).
        self._queue: deque[tuple[CompletionRequest, list[int], AdapterSet, Media | None, int]] = (
            deque()
        )
        self._events: list[Event] = []
        self._load_log = self.model.load_log + self.ctx.load_log
        self.chains = SlotChains(self.model, self.ctx, self.ctx.device_sampling)
        # Idle slots' cells go to host memory when a request starts (park.py).
        kv_bytes = sum(d["kv"] for d in buffer_sizes(self._load_log).values())
        room = budget(opts.prompt_cache, kv_bytes)
        self.parked = (
            PromptCache(
                self.ctx,
                room,
                self.model.n_swa,
                open_disk(opts, model_paths, self.n_ctx_slot, self.model.n_swa),
            )
            if room > 0 and not opts.embedding
            else None
        )
        self._unsaved = False  # a request ended since the idle slots went to disk (park.py)

    # ---- public API -----------------------------------------------------------------
    def submit(self, req: CompletionRequest) -> None:
        """Queue a request; it joins the batch at the next step (or fails there)."""
        try:
            media = None
            if req.images:
                tokens, media = media_prompt(self.projector, req, self.n_ctx_slot)
            else:
                tokens = prompt_tokens(self.model, req, self.n_ctx_slot)
            key = self.adapters.resolve(req.adapters) if req.adapters else ()
            head = head_length(self.parked, self.model, req, tokens, self.n_ctx_slot)
        except LocalLLMError as exc:
            self._events.append(Failed(req.id, exc.message, exc.status))
            return
        self._queue.append((req, tokens, key, media, head))

    def cancel(self, req_id: str) -> None:
        """End a request with ``Done(reason="cancel")`` at the next step."""
        for i, (req, *_) in enumerate(self._queue):
            if req.id == req_id:
                del self._queue[i]
                self._events.append(Done(req_id, "cancel"))
                return
        for s in self.slots:
            if s.active is not None and s.active.req.id == req_id:
                s.active.cancelled = True

    def has_work(self) -> bool:
        return bool(
            self._queue or self._events or self._unsaved or any(not s.free for s in self.slots)
        )

    def step(self) -> list[Event]:
        """Admit, build one batch, decode once, sample every slot; return the events."""
        events, self._events = self._events, []
        if self._unsaved and not self._queue and all(s.free for s in self.slots):
            self._unsaved = False  # idle: copying the slots to disk delays no request
            assert self.parked is not None
            self.parked.save_idle(self.slots)
        for s in self.slots:
            if s.active is not None and s.active.cancelled:
                events.extend(self._finish(s, "cancel"))
        while self._queue and any(s.free for s in self.slots):
            req, tokens, key, media, head = self._queue.popleft()
            try:
                events.extend(self._admit(req, tokens, key, media, head))
            except LocalLLMError as exc:
                events.append(Failed(req.id, exc.message, exc.status))
        self._steps += 1
        if self.opts.share_prefix:
            share_prefixes(self.ctx, self.slots, self.model.n_swa)
        only = self.adapters.for_step(self.slots) if self.adapters.any else None
        part = fill_batch(
            self.batch,
            self.slots,
            self.n_batch,
            self._steps,
            only,
            self.n_ctx_slot,
            self._budget,
            self.drafter,
            self.draft_cost,
        )
        if part:
            events.extend(self._decode(part))
        if self.projector is not None:  # at most one image chunk per step (see vision.py)
            events.extend(
                image_step(
                    self.projector,
                    self.ctx,
                    self.slots,
                    self._steps,
                    self.n_ubatch,
                    only,
                    self._sample,
                    self._fail,
                )
            )
        return events

    def _decode(self, part: list[tuple[Slot, int, bool]]) -> list[Event]:
        events: list[Event] = []
        t0 = time.perf_counter_ns()
        rc = self.ctx.decode(self.batch)
        dt = time.perf_counter_ns() - t0
        prompt = sum(len(s.cache) - before for s, before, prefill in part if prefill)
        if self.opts.step_ms:  # only a step-time budget learns from the timings
            self.cost.observe(dt, len(self.batch) - prompt, prompt)
        if prompt == 0 and rc == 0 and self.draft_cost is not None:
            self.draft_cost.observe(len(self.batch), dt)
        if rc != 0:
            for s, before, _ in part:
                events.append(self._fail(s, before, rc))
            return events
        for s, _, prefill in part:
            a = s.active
            assert a is not None
            # Charge the decode before sampling: sampling may finish the request and
            # build its Done, which must already include this step.
            if prefill:
                a.prompt_ns += dt
                if a.marks:
                    reached(self.parked, s)
            else:
                a.eval_ns += dt
            if s.logits_index >= 0:
                t1 = time.perf_counter_ns()
                events.extend(self._sample(s))
                if s.active is a:  # still running: its sampling time counts too
                    a.eval_ns += time.perf_counter_ns() - t1
        return events

    def embed(self, inputs: list[str], *, truncate: bool = True) -> tuple[list[list[float]], int]:
        """Pooled, L2-normalised embeddings of each input, and the prompt token count."""
        from localllm.engine.embed import embed

        self.adapters.apply(())  # embeddings are the base model's
        if not self.opts.embedding:
            raise InvalidRequest("this model was not loaded for embeddings (embedding=True)")
        return embed(self.ctx, self.batch, self.slots, self.n_ctx_slot, inputs, truncate=truncate)

    def rerank(
        self, query: str, documents: list[str], fmt: PairFormat, *, truncate: bool = True
    ) -> tuple[list[float], int]:
        """Each document's raw score against ``query`` (engine/embed.py) and the tokens read."""
        from localllm.engine.embed import rerank

        self.adapters.apply(())
        return rerank(
            self.ctx,
            self.batch,
            self.slots,
            self.n_ctx_slot,
            query,
            documents,
            fmt,
            truncate=truncate,
        )

    def score(
        self, prompts: list[str], options: list[list[str]]
    ) -> tuple[list[list[float]], int, int]:
        """Each prompt's options as ``log P(option | prompt)`` (engine/scoring.py), the
        prompts' tokens and the tokens decoded."""
        from localllm.engine.scoring import score

        if self.opts.embedding:
            raise InvalidRequest("this model was loaded for embeddings; it cannot score")
        self.adapters.apply(())  # the base model's probabilities
        for s in self.slots:  # a device chain on a slot would take its rows' logits
            if s.free:
                self.chains.detach(s.seq)
        out: list[list[float]] = []
        read = decoded = 0
        for prompt, opts in zip(prompts, options, strict=True):
            got = score(self.ctx, self.batch, self.slots, self.n_ctx_slot, prompt, opts)
            out.append(got.logprobs)
            read += got.prompt_tokens
            decoded += got.evaluated
        return out, read, decoded

    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return self.model.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: list[int], special: bool = False) -> str:
        """``special``: control tokens written out (``<s>``), else left out."""
        return self.model.detokenize(tokens, unparse_special=special)

    def info(self) -> EngineInfo:
        return engine_info(self.loaded, len(self.slots), self.opts.embedding)

    def memory_report(self) -> dict[str, dict[str, int]]:
        """Bytes llama.cpp allocated per device (see ``load.memory_report``)."""
        return memory_report(self.loaded, self._load_log, self.parked)

    def close(self) -> None:
        if self.parked is not None:  # the disk's copies are written before the context goes
            if self._unsaved:
                self.parked.save_idle(self.slots)
            self.parked.close()
        for s in self.slots:
            if s.active is not None:
                s.active.sampler.close()
                s.active = None
        # Adapters after the context that applies them, before the model they belong to.
        for h in ("drafter", "batch", "chains", "ctx", "adapters", "projector", "model"):
            obj = getattr(self, h, None)
            if obj is not None:
                obj.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ------------------------------------------------------------------
    def _admit(
        self,
        req: CompletionRequest,
        tokens: list[int],
        key: AdapterSet,
        media: Media | None,
        head: int,
    ) -> list[Event]:
        think = think_budget(self.model, req)
        picked = pick_slot(self.slots, tokens, key)
        assert picked is not None
        slot, n = picked
        if self.parked is not None and media is None:
            n = self.parked.on_admit(slot, tokens, key, n)
        n = min(n, len(tokens) - 1)  # re-evaluate the last prompt token for its logits
        if media is not None:  # an image is reused whole or evaluated afresh
            n = media.reusable(n)
        sampler = self.chains.sampler(slot.seq, req, self.opts.seed)  # device_sampling.py
        n = cut(self.ctx, slot, n)  # by position; 0 when this memory cannot cut mid-sequence
        # Position n sees n - n_swa + 1 .. n (llama.cpp masks p1 - p0 >= n_swa).
        if n and self.model.n_swa and not holds(self.ctx, slot, max(0, n - self.model.n_swa + 1)):
            n = cut(self.ctx, slot, 0)  # the window before n is gone: no reuse
        slot.adapters = key
        sampler.accept_prompt([t for t in tokens if t >= 0] if media is not None else tokens)
        slot.active = Active(
            req,
            tokens,
            sampler,
            TextStream(req.stop),
            n_past=n,
            cached=n,
            adapters=key,
            last_step=self._steps,
            keep=self.model.marker_tokens(req.markers),
            media=media,
            ngram=speculation(req, tokens),
            think=think,
        )
        if media is None:  # copies kept during its prefill (checkpoints.py)
            slot.active.marks = marks(self.parked, self.slots, tokens, key, n, head)
            reached(self.parked, slot)  # one where its reused cells end: kept now
        if self.parked is not None:  # the busy slots attend only over their own cells
            self.parked.park_idle(self.slots)
        if think is not None and think.due and tokens[-1] >= 0:  # budget 0, block opened
            return self._close_thinking(slot, len(tokens))
        return []

    def _sample(self, s: Slot) -> list[Event]:
        assert s.active is not None
        if s.active.draft_rows:
            return verify(self.ctx, s, self.take)
        return self.take(s, s.logits_index, len(s.cache))[0]

    def take(self, s: Slot, row: int, cells: int) -> tuple[list[Event], int]:
        """Sample output ``row`` as the token after the slot's first ``cells`` cells and
        handle it: the events, and the token (-1 when the request ended before it)."""
        a = s.active
        assert a is not None
        req = a.req
        if req.num_predict == 0:
            return self._finish(s, "length"), -1
        t = a.sampler.sample(row)
        if self.model.is_eog(t):
            return self._finish(s, "stop"), -1
        a.generated.append(t)
        if a.ngram is not None:
            a.ngram.extend((t,))
        text = a.text.feed(self.model.piece(t, special=t in a.keep))
        out: list[Event] = []
        if req.logprobs > 0:
            lp, top = self.ctx.top_logprobs(row, t, req.logprobs)
            out.append(Piece(req.id, text, t, lp, [(self.model.token_text(i), v) for i, v in top]))
        elif text:
            out.append(Piece(req.id, text, t))
        if a.text.stopped:
            out.extend(self._finish(s, "stop"))
        elif (
            0 < req.num_predict <= len(a.generated)
            # Unlimited: at most a context's worth of reply, shifted or not, so a model
            # that never ends its turn cannot hold a slot for ever.
            or (req.num_predict < 0 and len(a.generated) >= self.n_ctx_slot)
            or (
                cells >= self.n_ctx_slot
                and not (req.shift and self.can_shift and shift(self.ctx, s, req.num_keep))
            )
        ):
            out.extend(self._finish(s, "length"))
        else:
            a.pending = t
            if a.think is not None and a.think.feed(self.model.piece(t, special=True)):
                out.extend(self._close_thinking(s, cells + 1))
        return out, t

    def _close_thinking(self, s: Slot, cells: int) -> list[Event]:
        """The thinking budget is spent: the block's close, forced after ``cells`` cells."""
        a = s.active
        assert a is not None and a.think is not None
        close, req = a.think.close, a.req
        if cells + len(close) >= self.n_ctx_slot or (
            req.num_predict >= 0 and len(a.generated) + len(close) >= req.num_predict
        ):
            return []  # the forced tokens and one more would not fit: the reply ends first
        a.think.closed()
        a.forced = list(close)
        a.generated.extend(close)
        if a.ngram is not None:
            a.ngram.extend(close)
        text = "".join(a.text.feed(self.model.piece(t, special=t in a.keep)) for t in close)
        out: list[Event] = [Piece(a.req.id, text)] if text else []
        if a.text.stopped:  # a stop string in the forced text
            out.extend(self._finish(s, "stop"))
        return out

    def _finish(self, s: Slot, reason: str) -> list[Event]:
        a = s.active
        assert a is not None
        s.active = None
        a.sampler.close()
        if self.parked is not None and self.parked.disk is not None:
            self._unsaved = True
        out: list[Event] = []
        rest = a.text.flush()
        if rest:
            out.append(Piece(a.req.id, rest))
        out.append(
            Done(
                a.req.id,
                reason,  # type: ignore[arg-type]
                prompt_tokens=len(a.prompt),
                cached_tokens=a.cached,
                prompt_eval_ns=a.prompt_ns,
                eval_count=len(a.generated),
                eval_ns=a.eval_ns,
                stop=a.text.matched,
                drafted=a.drafted,
                accepted=a.accepted,
                context=(a.prompt if a.media is None else [t for t in a.prompt if t >= 0])
                + a.generated,
            )
        )
        return out

    def _fail(self, s: Slot, before: int, rc: int) -> Failed:
        """A failed decode: forget what this step added to the slot, fail its request."""
        a = s.active
        assert a is not None
        cut(self.ctx, s, before)
        s.active = None
        a.sampler.close()
        why = "no room left in the KV cache" if rc == 1 else f"llama_decode returned {rc}"
        return Failed(a.req.id, f"decoding failed: {why}", 500)
