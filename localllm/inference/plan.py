"""A native generate/chat request, resolved once: the :class:`Plan` (data only).

``/api/generate`` and ``/api/chat`` and the ``/v1`` routes (OpenAI, Responses,
Anthropic) all build one with :func:`~localllm.inference.build.chat_plan` or
:func:`~localllm.inference.build.generate_plan` (in a worker thread), which
call :func:`resolve` once per request: the options merged and checked, the
runner's request made (sampling, stop strings, the format's markers, the
thinking budget).  Running it, one choice or ``n``, is
:class:`~localllm.inference.generation.Generation`'s.

Ollama's empty requests (no prompt, no messages) are plans too, with
:class:`LoadOnly` in place of a runner request: they load the model (or, with
``keep_alive`` 0, unload it) and answer with one ``done`` chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from localllm.api.wire import JSONObject
from localllm.inference.images import Images
from localllm.inference.service import InferenceService, Prepared, Target
from localllm.inference.shaping import chat_format
from localllm.inference.thinkbudget import apply_budget
from localllm.toolcalls import Family


class Fim(NamedTuple):
    """A fill-in-the-middle prompt, tokenized when it runs (that needs the model loaded)."""

    ids: tuple[int, int, int]  # the model's prefix, suffix and middle tokens
    prefix: str
    suffix: str


@dataclass(frozen=True)
class Output:
    """How the runner's pieces become the reply's parts (``shaping.OutputShaper``), and
    what the last chunk adds."""

    think: bool | None = None
    tools: list[JSONObject] | None = None
    logprobs: bool = False
    tool_family: Family | None = None  # parse calls in this family whatever the template says
    # Name the stop string that ended the reply in the last chunk (not an Ollama field:
    # only converters that have one, Anthropic's stop_sequence, ask for it).
    report_stop: bool = False


@dataclass(frozen=True)
class LoadOnly:
    """Ollama's empty request: load the model (or, with ``keep_alive`` 0, unload it)."""

    options: Mapping[str, object] | None  # the request's, resolved when it runs
    keep_alive: Any


@dataclass(frozen=True)
class Plan:
    """A validated request, ready to run any number of times (``n`` choices).

    ``request`` is the runner request every choice starts from (each gets its own
    id, and a fixed seed moved by its index), or ``LoadOnly``.
    """

    target: Target
    model: str  # the name the client asked for, as chunks repeat it
    chat: bool  # /api/chat's chunks, else /api/generate's
    prompt: str | list[int]  # the rendered prompt; empty for a FIM prompt, made as it runs
    request: Prepared | LoadOnly
    output: Output = Output()
    images: Images = field(default_factory=Images)  # one per media marker in the prompt
    fim: Fim | None = None
    context: list[int] | None = None  # legacy /api/generate conversation tokens


def resolve(
    svc: InferenceService,
    target: Target,
    prompt: str | list[int],
    options: Mapping[str, object] | None,
    keep_alive: Any,
    *,
    raw: bool = False,
    grammar: str | None = None,
    logprobs: bool = False,
    top_logprobs: int = 0,
    truncate: bool | None = None,
    shift: bool | None = None,
    cache_head: int = 0,
    think_level: str | None = None,
    tool_family: Family | None = None,
) -> Prepared:
    """The runner request of a plan: options resolved (a bad value is a 400 here, before
    anything streams), the reply's format markers and thinking budget set.

    ``shift``: Ollama's, False stops at a full context with "length"; ``cache_head``: the
    prompt's shared head in characters; ``think_level``: Ollama's think level ("low",
    ...), a thinking budget; ``tool_family``: the format a forced call is written in.
    """
    prep = svc.prepare(
        target,
        prompt,
        options,
        keep_alive,
        raw_prompt=raw,
        grammar=grammar,
        logprobs=top_logprobs or (1 if logprobs else 0),
        truncate=truncate,
    )
    prep.completion.shift = shift is not False
    prep.completion.cache_head = cache_head
    fmt = chat_format(target, tool_family)
    if not raw:
        # The format's markers must reach the parser as text, control tokens or not.
        prep.completion.markers = list(fmt.markers)
    text = prompt if isinstance(prompt, str) else ""
    apply_budget(prep.completion, fmt, text, prep.values, options, think_level)
    return prep
