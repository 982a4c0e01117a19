"""One way to run a native generate/chat request: prepare, stream chunks, fold them.

``/api/generate`` and ``/api/chat`` and the ``/v1`` routes (OpenAI, Responses,
Anthropic) all go through :class:`Plan`: the route builds one with
:func:`~localllm.inference.build.chat_plan` or
:func:`~localllm.inference.build.generate_plan` (in a worker thread), then asks
it for what it answers with: ``run(i)`` streams the Ollama-shaped chunks of
choice ``i`` (the last one with ``done: true`` and the metrics), ``choices(n)``
interleaves ``n`` of them, ``result()`` / ``results(n)`` fold them into what
``stream: false`` returns, and ``count_tokens()`` measures the prompt.

Ollama's empty requests (no prompt, no messages) are plans too: they load the
model (or, with ``keep_alive`` 0, unload it) and answer with one ``done``
chunk whose ``done_reason`` says which.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar, cast

from localllm.api.wire import Chunk, GenerateChunk, Message
from localllm.inference.fanout import gather, merge
from localllm.inference.fold import fold, fold_chunks
from localllm.inference.images import Images
from localllm.inference.service import InferenceService, Prepared, Target, now_rfc3339
from localllm.inference.shaping import OutputShaper, Parts, chat_format
from localllm.inference.thinkbudget import apply_budget
from localllm.runner.messages import Done, Piece
from localllm.toolcalls import Family

# Loads and unloads asked for by a request that has since gone: held until they finish.
_SETTLING: set[asyncio.Task[str]] = set()

# The chunks a plan yields: ChatChunk for /api/chat's plans, GenerateChunk for /api/generate's.
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


class Fim(NamedTuple):
    """A fill-in-the-middle prompt, tokenized when it runs (that needs the model loaded)."""

    ids: tuple[int, int, int]  # the model's prefix, suffix and middle tokens
    prefix: str
    suffix: str


@dataclass
class Plan(Generic[C]):
    """A validated request, ready to run any number of times (``n`` choices).

    ``Plan[ChatChunk]`` (``chat``) or ``Plan[GenerateChunk]``: the kind of chunk it yields.
    """

    svc: InferenceService
    target: Target
    model: str
    chat: bool
    prompt: str | list[int]
    options: dict[str, Any] | None
    keep_alive: Any
    grammar: str | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    truncate: bool | None = None
    think: bool | None = None
    think_level: str | None = None  # Ollama's think level ("low", ...): a thinking budget
    tools: list[dict[str, Any]] | None = None
    tool_family: Family | None = None  # parse calls in this family whatever the template says
    raw: bool = False
    context: list[int] | None = None  # legacy /api/generate conversation tokens
    # Name the stop string that ended the reply in the last chunk (not an Ollama field:
    # only converters that have one, Anthropic's stop_sequence, ask for it).
    report_stop: bool = False
    shift: bool | None = None  # Ollama's "shift": False stops at a full context with "length"
    images: Images = field(default_factory=Images)  # one per media marker in the prompt
    fim: Fim | None = None  # the prompt, once tokenized (``prompt`` is empty until then)
    load_only: bool = False  # Ollama's empty request: load (or unload), generate nothing
    cache_head: int = 0  # the prompt's shared head, in characters (CompletionRequest's)
    _checked: bool = field(default=False, repr=False)

    # -- what routes answer with -----------------------------------------------------

    def run(self, index: int = 0) -> AsyncGenerator[C, None]:
        """The Ollama-shaped chunks of choice ``index``."""
        if self.load_only:
            return self._load()
        return self._events(self.prepare(index))

    def choices(self, n: int) -> AsyncGenerator[tuple[int, C], None]:
        """``(index, chunk)`` of ``n`` choices run at once, as their chunks come."""
        return merge([self.run(i) for i in range(n)])

    async def result(self) -> C:
        """The run folded into the one object ``stream: false`` returns."""
        return await fold(self.run(), self.chat)

    async def results(self, n: int) -> list[C]:
        """``n`` choices run at once, each folded."""
        runs = await gather([self.run(i) for i in range(n)])
        return [fold_chunks(chunks, self.chat) for chunks in runs]

    async def count_tokens(self) -> int:
        """The prompt's length as the model's tokenizer sees it (loads the model)."""
        prep = self.prepare()
        text = self.prompt if isinstance(self.prompt, str) else ""
        # add_special as the generation adds it (BOS), so this equals its prompt count.
        tokens = await self.svc.tokenize(
            self.target, text, prep.load, prep.keep_alive, add_special=True
        )
        return len(tokens)

    # -- running -----------------------------------------------------------------------

    def prepare(self, index: int = 0) -> Prepared:
        """The runner request for choice ``index``; a fixed seed moves by the index so
        that ``n`` seeded choices differ from each other yet stay reproducible."""
        prep = self.svc.prepare(
            self.target,
            self.prompt,
            self.options,
            self.keep_alive,
            raw_prompt=self.raw,
            grammar=self.grammar,
            logprobs=self.top_logprobs or (1 if self.logprobs else 0),
            truncate=self.truncate,
        )
        prep.completion.shift = self.shift is not False
        prep.completion.cache_head = self.cache_head
        fmt = chat_format(self.target, self.tool_family)
        if not self.raw:
            # The format's markers must reach the parser as text, control tokens or not.
            prep.completion.markers = list(fmt.markers)
        apply_budget(
            prep.completion,
            fmt,
            self.prompt if isinstance(self.prompt, str) else "",
            prep.values,
            self.options,
            self.think_level,
        )
        ready = self.images.ready
        if ready:
            prep.completion.images = list(ready)
        sampling = prep.completion.sampling
        if index and sampling.seed >= 0:
            sampling.seed += index
        return prep

    def check(self) -> None:
        """Resolve the options once so a bad value is a 400 before anything streams."""
        if not self._checked:
            self.prepare()
            self._checked = True

    async def _events(self, prep: Prepared) -> AsyncGenerator[C, None]:
        if self.fim is not None:
            prep.completion.prompt = await self._fim_tokens(prep)
        if self.context and isinstance(self.prompt, str):
            tokens = await self.svc.tokenize(self.target, self.prompt, prep.load, prep.keep_alive)
            prep.completion.prompt = list(self.context) + tokens
        if self.images and not prep.completion.images:
            prep.completion.images = await self.images.resolve()  # URLs, fetched once
        shaper = OutputShaper(
            self.target,
            think=self.think,
            tools=self.tools,
            logprobs=self.logprobs,
            tool_family=self.tool_family,
            prompt=self.prompt if isinstance(self.prompt, str) else "",
        )
        async for event in self.svc.stream(prep):
            if isinstance(event, Piece):
                parts = shaper.feed(event)
                if parts:
                    yield self._chunk(parts, False)
            elif isinstance(event, Done):
                body = self._chunk(shaper.finish(), True)
                add_metrics(body, event, prep)
                if self.report_stop and event.stop:
                    body["stop_sequence"] = event.stop
                if not self.chat and not prep.raw:
                    # Ollama returns the conversation's tokens (legacy ``context``), except raw.
                    cast(GenerateChunk, body)["context"] = event.context
                yield body

    async def _fim_tokens(self, prep: Prepared) -> list[int]:
        assert self.fim is not None
        (pre, suf, mid), tokenize = self.fim.ids, self.svc.tokenize
        prefix = await tokenize(self.target, self.fim.prefix, prep.load, prep.keep_alive)
        suffix = await tokenize(self.target, self.fim.suffix, prep.load, prep.keep_alive)
        return [pre, *prefix, suf, *suffix, mid]

    async def _load(self) -> AsyncGenerator[C, None]:
        # A load or unload, once asked for, finishes even if the client leaves meanwhile
        # (clients fire a preload and go; a half-done load would be wasted): the client's
        # leaving cancels this wait, not the task.
        task = asyncio.ensure_future(self.svc.load_only(self.target, self.options, self.keep_alive))
        _SETTLING.add(task)
        task.add_done_callback(_settled)
        reason = await asyncio.shield(task)
        body = self._chunk({}, True)
        body["done_reason"] = reason
        yield body

    def _chunk(self, parts: Parts, done: bool) -> C:
        # Built key by key, in the order Ollama's chunks have always had them on the wire.
        body: dict[str, object] = {"model": self.model, "created_at": now_rfc3339()}
        if self.chat:
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
