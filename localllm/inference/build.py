"""Requests -> plans: where a chat or generate request is checked, resolved and rendered.

:func:`chat_plan` and :func:`generate_plan` do all the CPU work a request
needs before it runs (the model's lookup in the store, validation, template
rendering, the grammar, the options resolved once), eagerly, so a bad request is
a plain 4xx before anything streams; routes call them in a worker thread
(``server.deps.offload``).  What they return, a
:class:`~localllm.inference.generation.Generation`, runs the request's
:class:`~localllm.inference.plan.Plan`.
"""

from __future__ import annotations

from typing import Any

from localllm.api.schemas_infer import ChatRequest, GenerateRequest
from localllm.api.wire import ChatChunk, GenerateChunk
from localllm.errors import InvalidRequest
from localllm.grammar.tools import forced_tool_grammar
from localllm.inference.cachehead import shared_head
from localllm.inference.generation import Generation
from localllm.inference.images import (
    Images,
    chat_images,
    check_rendered,
    prompt_images,
    require_vision,
)
from localllm.inference.plan import Fim, LoadOnly, Output, Plan, resolve
from localllm.inference.service import InferenceService, Prepared, Target
from localllm.inference.shaping import grammar_for, think_flag, think_level
from localllm.toolcalls import Family


def check_top_logprobs(n: int) -> None:
    if not 0 <= n <= 20:
        raise InvalidRequest("top_logprobs must be between 0 and 20")


def require_model(model: str) -> None:
    if not model:
        raise InvalidRequest("model is required")


def chat_plan(
    svc: InferenceService,
    req: ChatRequest,
    *,
    forced_tools: list[dict[str, Any]] | None = None,
    report_stop: bool = False,
) -> Generation[ChatChunk]:
    """A ``/api/chat`` request as a plan (no ``messages``: a load-only one).

    ``forced_tools``: the model must call one of these (the converters' forced-tool
    decision); its output is constrained by a grammar when the tools' schemas allow one.
    ``report_stop``: see :attr:`~localllm.inference.plan.Output.report_stop`.
    """
    require_model(req.model)
    if not req.messages:
        load = LoadOnly(req.options, req.keep_alive)
        return Generation(svc, Plan(svc.target(req.model), req.model, True, "", load))
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
    grammar = grammar_for(req.format, req.grammar)
    family: Family | None = None
    if forced_tools:
        forced = forced_tool_grammar(forced_tools, target.info.chat_template or "")
        if forced is not None:
            grammar, family = forced
    head = shared_head(svc, target, messages, prompt, tools=tools, think=req.think)
    request = _request(svc, target, prompt, req, grammar, head, tool_family=family)
    output = Output(think, tools, req.logprobs, family, report_stop)
    return Generation(svc, Plan(target, req.model, True, prompt, request, output, images))


def generate_plan(
    svc: InferenceService, req: GenerateRequest, *, load_if_empty: bool = True
) -> Generation[GenerateChunk]:
    """A ``/api/generate`` request as a plan.

    With neither prompt, suffix nor images it is load-only, as Ollama's, unless
    ``load_if_empty`` is off (``/v1/completions`` generates from an empty prompt).
    A ``suffix`` makes a fill-in-the-middle prompt from the model's FIM tokens.
    """
    require_model(req.model)
    check_top_logprobs(req.top_logprobs)
    target = svc.target(req.model)
    if req.raw and (req.template or req.system or req.context):
        raise InvalidRequest("raw mode does not support template, system, or context")
    if req.template:
        raise InvalidRequest(
            "per-request Go templates are not supported; the model's own chat template is used"
        )
    if load_if_empty and not req.prompt and not req.suffix and not req.images:
        load = LoadOnly(req.options, req.keep_alive)
        return Generation(svc, Plan(target, req.model, False, "", load))
    think = think_flag(req.think)
    images = Images()
    text = req.prompt
    fim: Fim | None = None
    head = 0
    if req.images:
        require_vision(target.projector is not None, req.model)
        if req.suffix or req.context:
            # Both turn the prompt into token ids, which cannot hold an image.
            raise InvalidRequest("images cannot be combined with suffix or context")
        text, images = prompt_images(req.prompt, req.images)
    if req.raw:
        prompt: str | list[int] = text
    elif req.suffix:
        fim = _fim(target, req)
        prompt = []
    else:
        messages: list[dict[str, Any]] = []
        system = req.system if req.system is not None else target.system
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": text})
        prompt = svc.render(target, messages, think=req.think)
        if images:
            check_rendered(prompt, images)
        head = shared_head(svc, target, messages, prompt, think=req.think)
    request = _request(
        svc, target, prompt, req, grammar_for(req.format, req.grammar), head, raw=req.raw
    )
    context = list(req.context) if req.context else None
    output = Output(think, logprobs=req.logprobs)
    plan = Plan(target, req.model, False, prompt, request, output, images, fim, context)
    return Generation(svc, plan)


def _request(
    svc: InferenceService,
    target: Target,
    prompt: str | list[int],
    req: ChatRequest | GenerateRequest,
    grammar: str | None,
    cache_head: int,
    *,
    raw: bool = False,
    tool_family: Family | None = None,
) -> Prepared:
    """The runner request of ``req``, from the fields chat and generate share (see
    :func:`~localllm.inference.plan.resolve`)."""
    return resolve(
        svc,
        target,
        prompt,
        req.options,
        req.keep_alive,
        raw=raw,
        grammar=grammar,
        logprobs=req.logprobs,
        top_logprobs=req.top_logprobs,
        truncate=req.truncate,
        shift=req.shift,
        cache_head=cache_head,
        think_level=think_level(req.think),
        tool_family=tool_family,
    )


def _fim(target: Target, req: GenerateRequest) -> Fim:
    kv = target.info.kv
    ids = [kv.get(f"tokenizer.ggml.fim_{part}_token_id") for part in ("pre", "suf", "mid")]
    if not all(isinstance(i, int) for i in ids):
        raise InvalidRequest(f'"{req.model}" does not support insert')
    pre, suf, mid = (int(i) for i in ids)  # type: ignore[arg-type]
    return Fim((pre, suf, mid), req.prompt, req.suffix or "")
