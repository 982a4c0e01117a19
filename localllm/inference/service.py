"""Inference use cases: generate, chat, embed, ps and unload, on top of the scheduler.

Routes hand in validated requests; this module resolves the model in the
store, merges options (defaults ← the model's params layer ← the request),
renders the prompt, holds a scheduler slot for the duration of the stream, and
yields Ollama-shaped response objects.  ``/v1`` routes convert to and from
these same calls.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from localllm import config, paths
from localllm.api.options import parse_keep_alive
from localllm.api.speculation import require_draft
from localllm.api.wire import JSONObject, PsEntry
from localllm.errors import InvalidRequest
from localllm.gguf.info import ModelInfo, read_model_info_split
from localllm.inference.options import ResolvedOptions, resolve_options
from localllm.inference.ps import ps_entry, utc_rfc3339
from localllm.models.details import model_details
from localllm.runner.messages import CompletionRequest, Done, LoadOptions, Piece
from localllm.scheduler.scheduler import ModelSpec, Scheduler
from localllm.store.local import Store
from localllm.store.manifests import Entry, Media
from localllm.store.names import parse_name
from localllm.template.chat import strip_leading_bos
from localllm.template.select import render_prompt

log = logging.getLogger(__name__)


def now_rfc3339() -> str:
    return utc_rfc3339(time.time())


@lru_cache(maxsize=64)
def _model_info(paths: tuple[str, ...], stamp: tuple[float, ...]) -> ModelInfo:
    from pathlib import Path

    return read_model_info_split([Path(p) for p in paths])


@dataclass(frozen=True)
class Target:
    """A model resolved from the store, with what prompt rendering needs."""

    entry: Entry
    spec: ModelSpec
    info: ModelInfo
    params: Mapping[str, object]  # the model's PARAMETERs
    system: str | None
    template: str | None = None  # the model's TEMPLATE layer (Go, or pasted Jinja)
    history: tuple[dict[str, Any], ...] = ()  # the model's MESSAGE layer
    projector: str | None = None  # a loadable vision projector: the model takes images


@dataclass
class Prepared:
    """A request turned into what the runner takes, plus how to hold the model."""

    target: Target
    load: LoadOptions
    completion: CompletionRequest
    keep_alive: float
    raw: bool = False
    values: dict[str, Any] = field(default_factory=dict)  # the merged options
    load_ns: int = 0  # filled by ``stream``: time to get the model ready
    total_ns: int = 0  # filled by ``stream`` before it yields ``Done``


class InferenceService:
    """Everything ``/api/generate|chat|embed|ps`` do."""

    def __init__(self, store: Store, scheduler: Scheduler) -> None:
        self.store = store
        self.scheduler = scheduler
        # model name -> callback for one generation's events (the app's metrics).
        self.observe: Callable[[str], Callable[[Piece | Done], None]] | None = None

    # -- resolving ---------------------------------------------------------------
    def target(self, model: str) -> Target:
        name = parse_name(model)
        entry = self.store.get(name)
        paths = tuple(str(p) for p in self.store.model_paths(entry))
        stamp = tuple(_stamp(p) for p in paths)
        info = _model_info(paths, stamp)
        projector = _projector(self.store.projector_path(entry))
        draft_path = self.store.draft_path(entry)
        draft = str(draft_path) if draft_path is not None else None
        spec = ModelSpec(
            name=name.display,
            # The base weights (and projector, draft model) only: adapters are chosen per
            # request.  A projector or draft is part of what is loaded, so the same GGUF
            # with and without one are two loads.
            key="|".join(
                paths + ((projector,) if projector else ()) + (("draft=" + draft,) if draft else ())
            ),
            model_paths=paths,
            digest=entry.digest,
            info=info,
            details=model_details(info),
            adapters=tuple(str(p) for p in self.store.adapter_paths(entry)),
            projector=projector,  # the scheduler loads it next to the model
            draft=draft,  # and this one too
            draft_info=_model_info((draft,), (_stamp(draft),)) if draft else None,
        )
        history = self.store.read_json_layer(entry, Media.MESSAGES)
        return Target(
            entry,
            spec,
            info,
            self.store.params(entry),
            self.store.system(entry),
            template=self.store.template(entry),
            history=tuple(m for m in history or () if isinstance(m, dict)),
            projector=projector,
        )

    def keep_alive(self, value: Any) -> float:
        parsed = parse_keep_alive(value)
        return config.KEEP_ALIVE.get() if parsed is None else parsed

    def prepare(
        self,
        target: Target,
        prompt: str | list[int],
        options: Mapping[str, object] | None,
        keep_alive: Any,
        *,
        raw_prompt: bool = False,
        grammar: str | None = None,
        logprobs: int = 0,
        truncate: bool | None = None,
    ) -> Prepared:
        has_draft = target.spec.draft is not None
        resolved = resolve_options(target.params, options, has_draft=has_draft)
        spec = resolved.speculation
        require_draft(spec, has_draft=has_draft, model=target.spec.name)
        sampling = resolved.sampling
        if grammar is not None:
            sampling.grammar = grammar
        completion = CompletionRequest(
            id=uuid.uuid4().hex,
            prompt=prompt,
            sampling=sampling,
            num_predict=resolved.num_predict,
            stop=resolved.stop,
            add_special=True,  # BOS as the tokenizer wants it, raw or not (as llama-server)
            parse_special=True,
            logprobs=logprobs,
            truncate=True if truncate is None else truncate,
            num_keep=resolved.num_keep,
            adapters=list(target.spec.adapters),
            draft_tokens=spec.tokens,
            draft_mode="ngram" if spec.mode == "off" else spec.mode,
            draft_min=spec.min,
            draft_p_min=spec.p_min,
        )
        return Prepared(
            target,
            base_load(resolved),
            completion,
            self.keep_alive(keep_alive),
            raw=raw_prompt,
            values=resolved.values,
        )

    def render(
        self,
        target: Target,
        messages: list[dict[str, Any]],
        *,
        tools: list[JSONObject] | None = None,
        think: bool | str | None = None,
    ) -> str:
        info = target.info
        if target.history:
            # As Ollama: the model's MESSAGE history follows the leading system messages.
            lead = 0
            while lead < len(messages) and messages[lead].get("role") == "system":
                lead += 1
            messages = [*messages[:lead], *target.history, *messages[lead:]]
        # A TEMPLATE layer wins over the GGUF's Jinja template; its syntax picks the renderer.
        prompt = render_prompt(
            target.template,
            info.chat_template,
            messages,
            tools=tools,
            think=think,
            bos_token=info.bos_token or "",
            eos_token=info.eos_token or "",
        )
        # As Ollama at OLLAMA_DEBUG=2: the prompt as the model will read it.
        log.log(config.TRACE, "prompt for %s:\n%s", target.spec.name, prompt)
        return strip_leading_bos(prompt, info.bos_token or "", info.add_bos_token)

    # -- running -----------------------------------------------------------------
    async def load_only(
        self, target: Target, options: Mapping[str, object] | None, keep_alive: Any
    ) -> str:
        """Load (or, with keep_alive 0, unload) a model: Ollama's empty-prompt requests."""
        resolved = resolve_options(target.params, options)
        keep = self.keep_alive(keep_alive)
        if keep == 0:
            for model in self.scheduler.loaded():
                if model.spec.key == target.spec.key:
                    await self.scheduler.unload(model.spec.key)
            return "unload"
        async with self.scheduler.use(target.spec, base_load(resolved), keep):
            pass
        return "load"

    async def stream(self, prep: Prepared) -> AsyncIterator[Piece | Done]:
        """Hold a slot of the model and stream the runner's events."""
        start = time.monotonic_ns()
        watch = self.observe(prep.target.spec.name) if self.observe is not None else None
        async with self.scheduler.use(prep.target.spec, prep.load, prep.keep_alive) as model:
            waited = time.monotonic_ns() - start
            # Ollama's load_duration: time spent getting the model ready for this request.
            load_ns = waited if waited > 1_000_000 else 0
            prep.load_ns = load_ns
            async for event in model.runner.complete(prep.completion):
                if isinstance(event, Done):
                    prep.total_ns = time.monotonic_ns() - start
                if watch is not None:
                    watch(event)
                yield event

    async def tokenize(
        self,
        target: Target,
        text: str,
        load: LoadOptions,
        keep_alive: float,
        *,
        add_special: bool = False,
    ) -> list[int]:
        async with self.scheduler.use(target.spec, load, keep_alive) as model:
            return await model.runner.tokenize(text, add_special=add_special, parse_special=True)

    async def embed(
        self,
        target: Target,
        inputs: list[str],
        *,
        truncate: bool,
        options: Mapping[str, object] | None,
        keep_alive: Any,
    ) -> tuple[Sequence[Sequence[float]], int, int]:
        """Pooled, L2-normalised embeddings; returns (vectors, prompt tokens, load ns)."""
        if target.info.rank_head:  # its pooled outputs are scores (inference/rerank.py)
            raise InvalidRequest(
                f'model "{target.spec.name}" is a reranker: it scores '
                "query-document pairs (/api/rerank), it does not embed"
            )
        resolved = resolve_options(target.params, options)
        load = base_load(resolved)
        load.embedding = True
        load.n_parallel = 1
        start = time.monotonic_ns()
        async with self.scheduler.use(target.spec, load, self.keep_alive(keep_alive)) as model:
            waited = time.monotonic_ns() - start
            if not inputs:
                return [], 0, waited
            vectors, n_tokens = await model.runner.embed(inputs, truncate)
        return vectors, n_tokens, waited

    def ps(self) -> list[PsEntry]:
        out = []
        models = sorted(self.scheduler.loaded(), key=lambda m: m.expires_at, reverse=True)
        for model in models:
            out.append(ps_entry(model))
        return out

    async def unload(self, target: Target) -> bool:
        return await self.scheduler.unload(target.spec.key)


def base_load(resolved: ResolvedOptions) -> LoadOptions:
    """Requested load options: ``n_ctx`` 0 and ``n_gpu_layers`` -1 mean "let the planner choose"."""
    base = LoadOptions(
        n_ctx=0,
        n_parallel=max(1, config.NUM_PARALLEL.get()),
        n_gpu_layers=-1,
        n_threads=config.NUM_THREAD.get(),
        flash_attn=config.FLASH_ATTENTION.get(),  # parsed and checked by config
        kv_type=config.KV_CACHE_TYPE.get(),
        step_tokens=config.STEP_BUDGET.get().tokens,
        step_ms=config.STEP_BUDGET.get().ms,
        prompt_cache=config.PROMPT_CACHE.get(),
        prompt_cache_disk=config.PROMPT_CACHE_DISK.get(),
        prompt_cache_dir=str(paths.prompt_cache()),
        prompt_cache_key=str(paths.prompt_cache_key()),
        draft_gate=config.DRAFT_GATE.get(),
    )
    return resolved.load.apply(base)


def _projector(path: Any) -> str | None:
    """The projector's path when it is a clip GGUF (checked once per file version)."""
    if path is None:
        return None
    text = str(path)
    return text if _loadable_projector(text, _stamp(text)) else None


@lru_cache(maxsize=64)
def _loadable_projector(path: str, stamp: float) -> bool:
    from pathlib import Path

    from localllm.store.projector import is_loadable_projector

    return is_loadable_projector(Path(path))


def _stamp(path: str) -> float:
    import os

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InvalidRequest(f"model file {os.path.basename(path)} is missing") from None
    return st.st_mtime + st.st_size
