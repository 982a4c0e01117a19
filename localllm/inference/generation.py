"""Running a :class:`~localllm.inference.plan.Plan`: stream its chunks, fold them, count.

A :class:`Generation` is a plan on the service that runs it.  ``run(i)`` streams
the Ollama-shaped chunks of choice ``i`` (the last one with ``done: true`` and
the metrics), ``choices(n)`` interleaves ``n`` of them, ``result()`` /
``results(n)`` fold them into what ``stream: false`` returns, and
``count_tokens()`` measures the prompt.  Each choice starts from the plan's one
resolved runner request: a copy with its own id and, for a fixed seed, the seed
moved by its index, so that ``n`` seeded choices differ yet stay reproducible.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Generic, TypeVar, cast

from localllm.api.wire import Chunk, GenerateChunk, Message
from localllm.inference.fanout import gather, merge
from localllm.inference.fold import fold, fold_chunks
from localllm.inference.plan import LoadOnly, Plan, resolve
from localllm.inference.service import InferenceService, Prepared, now_rfc3339
from localllm.inference.shaping import OutputShaper, Parts
from localllm.runner.messages import Done, Piece

# Loads and unloads asked for by a request that has since gone: held until they finish.
_SETTLING: set[asyncio.Task[str]] = set()

# The chunks a generation yields: ChatChunk for /api/chat's plans, GenerateChunk for
# /api/generate's.
C = TypeVar("C", bound=Chunk)


# The prompt cache is shared by every client of a daemon: an exact count of the tokens
# it held would let one client learn another's cached prompt a token at a time (try a
# guess, read the count).  Counts go out in whole blocks, as OpenAI reports them.
CACHED_BLOCK = 128


def reported_cached(tokens: int) -> int:
    """``tokens`` of the prompt the cache held, as clients are told: whole blocks only."""
    return tokens - tokens % CACHED_BLOCK


def add_metrics(body: Chunk, done: Done, prep: Prepared) -> None:
    """The last chunk's metrics (:class:`~localllm.api.wire.Metrics`), after ``done``."""
    body["done_reason"] = "stop" if done.reason == "cancel" else done.reason
    body["total_duration"] = prep.total_ns
    body["load_duration"] = prep.load_ns
    body["prompt_eval_count"] = done.prompt_tokens
    body["prompt_cached_count"] = reported_cached(done.cached_tokens)
    body["prompt_eval_duration"] = done.prompt_eval_ns
    body["eval_count"] = done.eval_count
    body["eval_duration"] = done.eval_ns
    if done.drafted:  # speculation was on: how many drafted tokens were accepted
        body["draft_count"] = done.drafted
        body["draft_accepted_count"] = done.accepted


class Generation(Generic[C]):
    """A plan and the service that runs it (see the module docstring).

    ``Generation[ChatChunk]`` (a ``chat`` plan) or ``Generation[GenerateChunk]``: the
    kind of chunk it yields.
    """

    def __init__(self, svc: InferenceService, plan: Plan) -> None:
        self.svc = svc
        self.plan = plan

    @property
    def model(self) -> str:
        return self.plan.model

    @property
    def prompt(self) -> str | list[int]:
        """The rendered prompt (``/apply-template`` answers with it)."""
        return self.plan.prompt

    # -- what routes answer with -----------------------------------------------------

    def run(self, index: int = 0) -> AsyncGenerator[C, None]:
        """The Ollama-shaped chunks of choice ``index``."""
        request = self.plan.request
        if isinstance(request, LoadOnly):
            return self._load(request)
        return self._events(self._choice(request, index))

    def choices(self, n: int) -> AsyncGenerator[tuple[int, C], None]:
        """``(index, chunk)`` of ``n`` choices run at once, as their chunks come."""
        return merge([self.run(i) for i in range(n)])

    async def result(self) -> C:
        """The run folded into the one object ``stream: false`` returns."""
        return await fold(self.run(), self.plan.chat)

    async def results(self, n: int) -> list[C]:
        """``n`` choices run at once, each folded."""
        runs = await gather([self.run(i) for i in range(n)])
        return [fold_chunks(chunks, self.plan.chat) for chunks in runs]

    async def count_tokens(self) -> int:
        """The prompt's length as the model's tokenizer sees it (loads the model)."""
        prep = self._prepared()
        prompt = self.plan.prompt
        text = prompt if isinstance(prompt, str) else ""
        # add_special as the generation adds it (BOS), so this equals its prompt count.
        tokens = await self.svc.tokenize(
            self.plan.target, text, prep.load, prep.keep_alive, add_special=True
        )
        return len(tokens)

    # -- running -----------------------------------------------------------------------

    def _prepared(self) -> Prepared:
        plan, request = self.plan, self.plan.request
        if isinstance(request, LoadOnly):  # an empty conversation counted: resolved now
            return resolve(self.svc, plan.target, plan.prompt, request.options, request.keep_alive)
        return request

    def _choice(self, base: Prepared, index: int) -> Prepared:
        """Choice ``index``'s runner request: ``base`` with its own id, the images that
        need no fetch, and a fixed seed moved by the index."""
        sampling = base.completion.sampling
        if index and sampling.seed >= 0:
            sampling = replace(sampling, seed=sampling.seed + index)
        else:
            sampling = replace(sampling)
        completion = replace(base.completion, id=uuid.uuid4().hex, sampling=sampling)
        ready = self.plan.images.ready
        if ready:
            completion.images = list(ready)
        return replace(base, completion=completion)

    async def _events(self, prep: Prepared) -> AsyncGenerator[C, None]:
        plan = self.plan
        if plan.fim is not None:
            prep.completion.prompt = await self._fim_tokens(prep)
        if plan.context and isinstance(plan.prompt, str):
            tokens = await self.svc.tokenize(plan.target, plan.prompt, prep.load, prep.keep_alive)
            prep.completion.prompt = list(plan.context) + tokens
        if plan.images and not prep.completion.images:
            prep.completion.images = await plan.images.resolve()  # URLs, fetched once
        out = plan.output
        shaper = OutputShaper(
            plan.target,
            think=out.think,
            tools=out.tools,
            logprobs=out.logprobs,
            tool_family=out.tool_family,
            prompt=plan.prompt if isinstance(plan.prompt, str) else "",
        )
        async for event in self.svc.stream(prep):
            if isinstance(event, Piece):
                parts = shaper.feed(event)
                if parts:
                    yield self._chunk(parts, False)
            elif isinstance(event, Done):
                body = self._chunk(shaper.finish(), True)
                add_metrics(body, event, prep)
                if out.report_stop and event.stop:
                    body["stop_sequence"] = event.stop
                if not plan.chat and not prep.raw:
                    # Ollama returns the conversation's tokens (legacy ``context``), except raw.
                    cast(GenerateChunk, body)["context"] = event.context
                yield body

    async def _fim_tokens(self, prep: Prepared) -> list[int]:
        fim = self.plan.fim
        assert fim is not None
        (pre, suf, mid), tokenize, target = fim.ids, self.svc.tokenize, self.plan.target
        prefix = await tokenize(target, fim.prefix, prep.load, prep.keep_alive)
        suffix = await tokenize(target, fim.suffix, prep.load, prep.keep_alive)
        return [pre, *prefix, suf, *suffix, mid]

    async def _load(self, request: LoadOnly) -> AsyncGenerator[C, None]:
        # A load or unload, once asked for, finishes even if the client leaves meanwhile
        # (clients fire a preload and go; a half-done load would be wasted): the client's
        # leaving cancels this wait, not the task.
        task = asyncio.ensure_future(
            self.svc.load_only(self.plan.target, request.options, request.keep_alive)
        )
        _SETTLING.add(task)
        task.add_done_callback(_settled)
        reason = await asyncio.shield(task)
        body = self._chunk({}, True)
        body["done_reason"] = reason
        yield body

    def _chunk(self, parts: Parts, done: bool) -> C:
        # Built key by key, in the order Ollama's chunks have always had them on the wire.
        body: dict[str, object] = {"model": self.plan.model, "created_at": now_rfc3339()}
        if self.plan.chat:
            message: Message = {"role": "assistant", "content": parts.get("content", "")}
            if parts.get("thinking"):
                message["thinking"] = parts["thinking"]
            if parts.get("tool_calls"):
                message["tool_calls"] = parts["tool_calls"]
            body["message"] = message
        else:
            body["response"] = parts.get("content", "")
            if parts.get("thinking"):
                body["thinking"] = parts["thinking"]
        if parts.get("logprobs"):
            body["logprobs"] = parts["logprobs"]
        body["done"] = done
        return cast(C, body)  # a ChatChunk when ``chat``, else a GenerateChunk


def _settled(task: asyncio.Task[str]) -> None:
    _SETTLING.discard(task)
    if not task.cancelled():
        task.exception()  # seen here: a failure whose client has gone is not "never retrieved"
