"""Decision questions answered by scoring: the prompts, run on the scheduler, read back.

A System One request is answered without generating: each question becomes one
chat prompt (its turns worded by compat/systemone.py), rendered with the model's
own template so that it ends where the assistant's answer starts, and each option is
scored as that answer (engine/scoring.py: ``log P(option | prompt)``, summed over
the option's tokens, in one evaluation of the prompt with the options branching
from it).  The probabilities are those log-probabilities normalised over the
options; nothing is sampled, so the answer is the model's, exactly, and the same
every time.

The turns put the state first, so every question of a request opens with the same
tokens and the engine reads them once (its slots keep the prefix).  Thinking
models are rendered with thinking off: the answer must come first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from localllm.errors import InvalidRequest
from localllm.inference.options import resolve_options
from localllm.inference.service import InferenceService, Target, base_load
from localllm.runner.messages import LoadOptions

# Questions a runner call takes: a call holds the runner's engine thread, so a long
# request goes in parts and the model's other requests get turns between them.
CHUNK = 8


@dataclass(frozen=True)
class ScorePlan:
    """A checked request made into what the runner takes."""

    target: Target
    load: LoadOptions
    keep_alive: float
    prompts: list[str]  # one per question, in order
    labels: list[list[str]]  # each question's options as the model answers them


@dataclass(frozen=True)
class Decided:
    logprobs: list[list[float]]  # per question, per option
    n_tokens: int  # the prompts' tokens
    load_ns: int


def score_plan(
    svc: InferenceService,
    model: str,
    turns: list[tuple[str, str]],
    labels: list[list[str]],
    options: Mapping[str, object] | None,
    keep_alive: int | float | str | None,
) -> ScorePlan:
    """The model looked up and each question's prompt rendered from its (system, user)
    turns; ``labels[i]`` are question i's options (a worker thread's work)."""
    if not model:
        raise InvalidRequest("model is required")
    target = svc.target(model)
    if target.info.rank_head:
        raise InvalidRequest(
            f'model "{model}" is a reranker: it scores query-document pairs '
            "(/api/rerank); decisions need a generative model"
        )
    load = base_load(resolve_options(target.params, options))
    prompts = [prompt(svc, target, system, user) for system, user in turns]
    return ScorePlan(target, load, svc.keep_alive(keep_alive), prompts, labels)


def prompt(svc: InferenceService, target: Target, system: str, user: str) -> str:
    """The chat prompt, ending where the assistant's answer starts (thinking off)."""
    messages: list[dict[str, str]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    return svc.render(target, messages, think=False)


async def decide(svc: InferenceService, plan: ScorePlan) -> Decided:
    """Every question's options scored on the model's runner."""
    start = time.monotonic_ns()
    out: list[list[float]] = []
    n_tokens = 0
    async with svc.scheduler.use(plan.target.spec, plan.load, plan.keep_alive) as model:
        waited = time.monotonic_ns() - start
        for i in range(0, len(plan.prompts), CHUNK):
            part, n, _ = await model.runner.score(
                plan.prompts[i : i + CHUNK], plan.labels[i : i + CHUNK]
            )
            out += part
            n_tokens += n
    return Decided(out, n_tokens, waited if waited > 1_000_000 else 0)
