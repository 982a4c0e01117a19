"""One way to run a native generate/chat request: validate, render, prepare, stream chunks.

``/api/generate`` and ``/api/chat`` and the OpenAI-compatible ``/v1`` routes
all go through :class:`Plan`: the route builds one (validation, rendering and
option checks happen here, eagerly, so they answer with a plain 4xx), then
``plan.prepare(i)`` makes the runner request of choice ``i`` and
``plan.events(prep)`` streams Ollama-shaped chunks (the last one with
``done: true`` and the metrics).  ``fold`` turns such a stream into the single
object that ``stream: false`` returns.  Embeddings share ``embed_native``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from localllm.api.schemas_infer import ChatRequest, EmbedRequest, GenerateRequest
from localllm.errors import InvalidRequest
from localllm.grammar.tools import forced_tool_grammar
from localllm.inference.images import (
    Images,
    chat_images,
    check_rendered,
    prompt_images,
    require_vision,
)
from localllm.inference.release import dismantle
from localllm.inference.service import InferenceService, Prepared, Target, now_rfc3339
from localllm.inference.shaping import OutputShaper, chat_format, grammar_for, think_flag
from localllm.runner.messages import Done, Piece
from localllm.toolcalls import Family


def final_metrics(done: Done, prep: Prepared) -> dict[str, Any]:
    metrics = {
        "done_reason": "stop" if done.reason == "cancel" else done.reason,
        "total_duration": prep.total_ns,
        "load_duration": prep.load_ns,
        "prompt_eval_count": done.prompt_tokens,
        "prompt_eval_duration": done.prompt_eval_ns,
        "eval_count": done.eval_count,
        "eval_duration": done.eval_ns,
    }
    if done.drafted:  # speculation was on: how many drafted tokens were accepted
        metrics.update(draft_count=done.drafted, draft_accepted_count=done.accepted)
    return metrics


def check_top_logprobs(n: int) -> None:
    if not 0 <= n <= 20:
        raise InvalidRequest("top_logprobs must be between 0 and 20")


@dataclass
class Plan:
    """A validated request, ready to run any number of times (``n`` choices)."""

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
    tools: list[dict[str, Any]] | None = None
    tool_family: Family | None = None  # parse calls in this family whatever the template says
    raw: bool = False
    context: list[int] | None = None  # legacy /api/generate conversation tokens
    # Name the stop string that ended the reply in the last chunk (not an Ollama field:
    # only converters that have one, Anthropic's stop_sequence, ask for it).
    report_stop: bool = False
    shift: bool | None = None  # Ollama's "shift": False stops at a full context with "length"
    images: Images = field(default_factory=Images)  # one per media marker in the prompt
    _checked: bool = field(default=False, repr=False)

    def prepare(self, index: int = 0) -> Prepared:
        """The runner request for choice ``index``; a fixed seed moves by the index so
        that ``n`` seeded choices differ from each other yet stay reproducible."""
        prep = self.svc.prepare(
            self.target, self.prompt, self.options, self.keep_alive, raw_prompt=self.raw,
            grammar=self.grammar, logprobs=self.top_logprobs or (1 if self.logprobs else 0),
            truncate=self.truncate)
        prep.completion.shift = self.shift is not False
        if not self.raw:
            # The format's markers must reach the parser as text, control tokens or not.
            prep.completion.markers = list(chat_format(self.target, self.tool_family).markers)
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

    async def events(self, prep: Prepared) -> AsyncGenerator[dict[str, Any], None]:
        """Stream Ollama-shaped chunks for one run of this request."""
        if self.context and isinstance(self.prompt, str):
            tokens = await self.svc.tokenize(self.target, self.prompt, prep.load,
                                             prep.keep_alive)
            prep.completion.prompt = list(self.context) + tokens
        if self.images and not prep.completion.images:
            prep.completion.images = await self.images.resolve()  # URLs, fetched once
        shaper = OutputShaper(self.target, think=self.think, tools=self.tools,
                              logprobs=self.logprobs, tool_family=self.tool_family,
                              prompt=self.prompt if isinstance(self.prompt, str) else "")
        async for event in self.svc.stream(prep):
            if isinstance(event, Piece):
                parts = shaper.feed(event)
                if parts:
                    yield self._chunk(parts, False)
            elif isinstance(event, Done):
                body = self._chunk(shaper.finish(), True)
                body.update(final_metrics(event, prep))
                if self.report_stop and event.stop:
                    body["stop_sequence"] = event.stop
                if not self.chat and not prep.raw:
                    # Ollama returns the conversation's tokens (legacy ``context``), except raw.
                    body["context"] = event.context
                yield body

    def _chunk(self, parts: dict[str, Any], done: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "created_at": now_rfc3339()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": parts.get("content", "")}
            for key in ("thinking", "tool_calls"):
                if parts.get(key):
                    message[key] = parts[key]
            body["message"] = message
        else:
            body["response"] = parts.get("content", "")
            if parts.get("thinking"):
                body["thinking"] = parts["thinking"]
        if parts.get("logprobs"):
            body["logprobs"] = parts["logprobs"]
        body["done"] = done
        return body


def chat_plan(svc: InferenceService, req: ChatRequest, *,
              forced_tools: list[dict[str, Any]] | None = None) -> Plan:
    """A ``/api/chat`` request (non-empty ``messages``) as a plan.

    ``forced_tools``: the model must call one of these (OpenAI's ``tool_choice``);
    its output is constrained by a grammar when the tools' schemas allow one.
    """
    check_top_logprobs(req.top_logprobs)
    target = svc.target(req.model)
    think = think_flag(req.think)
    messages = [m.model_dump(exclude_none=True) for m in req.messages]
    images = Images()
    if any(m.images for m in req.messages):
        require_vision(target.projector is not None, req.model)
        messages, images = chat_images(messages)
    if target.system and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": target.system})
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    # The template gets the level itself (gpt-oss's reasoning_effort); the shaper the flag.
    prompt = svc.render(target, messages, tools=tools, think=req.think)
    if images:
        check_rendered(prompt, images)
    grammar = grammar_for(req.format)
    family: Family | None = None
    if forced_tools:
        forced = forced_tool_grammar(forced_tools, target.info.chat_template or "")
        if forced is not None:
            grammar, family = forced
    plan = Plan(svc, target, req.model, True, prompt, req.options, req.keep_alive,
                grammar=grammar, logprobs=req.logprobs, top_logprobs=req.top_logprobs,
                truncate=req.truncate, think=think, tools=tools, tool_family=family,
                images=images, shift=req.shift)
    plan.check()
    return plan


def generate_plan(svc: InferenceService, target: Target, req: GenerateRequest,
                  fim: list[int] | None = None) -> Plan:
    """A ``/api/generate`` request with a prompt or suffix as a plan.

    ``fim``: the fill-in-the-middle prompt ``fim_prompt`` made for a request with a
    ``suffix`` (it needs the model's tokenizer, hence the runner: made first, apart).
    """
    check_top_logprobs(req.top_logprobs)
    think = think_flag(req.think)
    images = Images()
    text = req.prompt
    if req.images:
        require_vision(target.projector is not None, req.model)
        if req.suffix or req.context:
            # Both turn the prompt into token ids, which cannot hold an image.
            raise InvalidRequest("images cannot be combined with suffix or context")
        text, images = prompt_images(req.prompt, req.images)
    if req.raw:
        prompt: str | list[int] = text
    elif req.suffix:
        if fim is None:
            raise InvalidRequest("a suffix needs the fill-in-the-middle prompt")
        prompt = fim
    else:
        messages: list[dict[str, Any]] = []
        system = req.system if req.system is not None else target.system
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": text})
        prompt = svc.render(target, messages, think=req.think)
        if images:
            check_rendered(prompt, images)
    plan = Plan(svc, target, req.model, False, prompt, req.options, req.keep_alive,
                grammar=grammar_for(req.format), logprobs=req.logprobs,
                top_logprobs=req.top_logprobs, truncate=req.truncate, think=think,
                raw=req.raw, context=list(req.context) if req.context else None,
                images=images, shift=req.shift)
    plan.check()
    return plan


async def fim_prompt(svc: InferenceService, target: Target,
                     req: GenerateRequest) -> list[int] | None:
    """The fill-in-the-middle tokens a ``suffix`` request runs on, else None."""
    if req.raw or not req.suffix or req.images:
        return None  # images with a suffix are refused by ``generate_plan``
    check_top_logprobs(req.top_logprobs)
    think_flag(req.think)
    kv = target.info.kv
    ids = [kv.get(f"tokenizer.ggml.fim_{part}_token_id") for part in ("pre", "suf", "mid")]
    if not all(isinstance(i, int) for i in ids):
        raise InvalidRequest(f'"{req.model}" does not support insert')
    resolved = svc.prepare(target, "", req.options, req.keep_alive)
    pre = await svc.tokenize(target, req.prompt, resolved.load, resolved.keep_alive)
    suf = await svc.tokenize(target, req.suffix, resolved.load, resolved.keep_alive)
    return [int(ids[0]), *pre, int(ids[1]), *suf, int(ids[2])]  # type: ignore[arg-type]


async def fold(events: AsyncIterator[dict[str, Any]], chat: bool) -> dict[str, Any]:
    """A whole stream of chunks as the one object ``stream: false`` returns."""
    folded: dict[str, Any] = {}
    texts: dict[str, list[str]] = {"content": [], "thinking": []}
    calls: list[Any] = []
    logprobs: list[Any] = []
    async for event in events:
        body = event.get("message") if chat else event
        assert isinstance(body, dict)
        texts["content"].append(body.get("content" if chat else "response") or "")
        texts["thinking"].append(body.get("thinking") or "")
        calls.extend(body.get("tool_calls") or [])
        logprobs.extend(event.get("logprobs") or [])
        folded = event
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts["content"])}
        if any(texts["thinking"]):
            message["thinking"] = "".join(texts["thinking"])
        if calls:
            message["tool_calls"] = calls
        folded["message"] = message
    else:
        folded["response"] = "".join(texts["content"])
        if any(texts["thinking"]):
            folded["thinking"] = "".join(texts["thinking"])
    if logprobs:
        folded["logprobs"] = logprobs
    return folded


def _normalise(vector: Sequence[float], dimensions: int | None) -> tuple[float, ...]:
    # A tuple: see runner.attach.Floats.tuples (the collector walks lists of floats).
    if dimensions:
        vector = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in vector))
    return tuple(x / norm for x in vector) if norm > 0 else tuple(vector)


def _normalise_all(box: list[Sequence[Sequence[float]]],
                   dimensions: int | None) -> list[tuple[float, ...]]:
    raw = list(box.pop())
    out = [_normalise(v, dimensions) for v in raw]
    dismantle(raw)  # freed row by row here, not in one long call
    return out


async def embed_native(svc: InferenceService, req: EmbedRequest,
                       target: Target) -> dict[str, Any]:
    """``/api/embed``'s answer (also what ``/v1/embeddings`` converts), for the model
    ``req.model`` resolved as ``target``."""
    if req.dimensions is not None and req.dimensions <= 0:
        raise InvalidRequest("dimensions must be a positive integer")
    inputs = [req.input] if isinstance(req.input, str) else list(req.input)
    start = time.monotonic_ns()
    vectors, n_tokens, load_ns = await svc.embed(
        target, inputs, truncate=req.truncate, options=req.options, keep_alive=req.keep_alive)
    # Python arithmetic over every float (768k for a thousand inputs) off the event loop;
    # the thread takes the only reference to the raw vectors, so they are freed there too.
    box = [vectors]
    del vectors
    embeddings = await asyncio.to_thread(_normalise_all, box, req.dimensions)
    return {
        "model": req.model,
        "embeddings": embeddings,
        "total_duration": time.monotonic_ns() - start,
        "load_duration": load_ns,
        "prompt_eval_count": n_tokens,
    }
