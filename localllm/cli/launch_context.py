"""How much context ``localllm launch`` gives an agent, and the model that carries it.

Agents send 10-30k-token system prompts and never send ``num_ctx``, so the
context has to belong to the model they name: ``agent_model`` derives
``NAME-agent:<ctx>`` (Modelfile ``PARAMETER num_ctx``, one slot), and every
request to it, from any client, loads the model with that context.

``choose`` picks the context: the largest from the agent's wish down that the
planner says fits, all layers on the GPUs first, at least ``AGENT_FLOOR`` tokens
where that fits at all, never past the model's own training context.  An
explicit ``num_ctx`` is loaded as asked (the planner only shrinks automatic
contexts), so the fit is judged before the load: ``daemon_fit`` asks the daemon
(``/api/show`` with ``fit_contexts``), whose planner judges every candidate on its
own machine with its own store, the memory of the models it holds counted as free
(the scheduler evicts them to make room).  The CLI plans nothing itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from localllm.errors import LocalLLMError
from localllm.store.names import DEFAULT_HOST, DEFAULT_NAMESPACE, ModelName, parse_name

if TYPE_CHECKING:
    from localllm.api.client import Client

AGENT_CONTEXT = 65536  # what an agent is given when memory allows
AGENT_FLOOR = 32768  # below this, agents' prompts may not fit
LADDER = (262144, 131072, 65536, 32768, 16384, 8192, 4096)
SLOTS = 1  # one conversation: context is worth more to an agent than parallel requests


@dataclass(frozen=True)
class Fit:
    """The planner's verdict for one context."""

    fits: bool
    on_gpu: bool  # every layer on the GPUs, or there are none to use
    reason: str


@dataclass(frozen=True)
class Choice:
    context: int
    asked: int
    limit: int  # the model's training context (0: unknown)
    fit: Fit | None  # None: not judged (a remote daemon, or --context)

    def notes(self) -> list[str]:
        """Why the context is what it is, for the user."""
        out = []
        if self.limit and self.asked > self.limit and self.context == self.limit:
            out.append(f"the model's own limit is {self.limit} tokens")
        elif self.context < min(self.asked, self.limit or self.asked):
            out.append(f"reduced from {min(self.asked, self.limit or self.asked)} to fit")
        return out


def choose(asked: int, limit: int, fit_at: Callable[[int], Fit] | None) -> Choice:
    """The context to load (see the module docstring); ``fit_at`` None trusts ``asked``."""
    top = min(asked, limit) if limit > 0 else asked
    if fit_at is None:
        return Choice(top, asked, limit, None)
    tried = candidates(asked, limit)
    verdicts = [(c, fit_at(c)) for c in tried]
    floor = min(AGENT_FLOOR, top)
    roomy = [(c, f) for c, f in verdicts if c >= floor and f.fits]
    for c, f in roomy:
        if f.on_gpu:
            return Choice(c, asked, limit, f)
    if roomy:  # some layers on the CPU: slower, but the prompts fit
        return Choice(roomy[0][0], asked, limit, roomy[0][1])
    for c, f in verdicts:
        if f.fits:
            return Choice(c, asked, limit, f)
    smallest = verdicts[-1][1]
    raise LocalLLMError(
        f"the model does not fit in this machine's memory even with a "
        f"{tried[-1]}-token context ({smallest.reason}); "
        "try a smaller model or quantization, or force one with --context"
    )


def context_tag(context: int) -> str:
    return f"{context // 1024}k" if context % 1024 == 0 else str(context)


def agent_model(model: str, context: int) -> ModelName:
    """The derived model's name: ``coder:7b`` -> ``coder-agent:7b-64k``, ``coder`` ->
    ``coder-agent:64k``.

    Library and ``namespace/`` names keep their namespace; ``hf.co/user/repo`` names
    become local ones (``repo-agent``), as a derived model is not on the Hub.
    """
    name = parse_name(model)
    namespace = name.namespace if name.host == DEFAULT_HOST else DEFAULT_NAMESPACE
    base_tag = name.tag
    if name.model.endswith("-agent"):  # launched on a derived model: re-derive its base's
        stem = name.model
        base_tag = re.sub(r"(^|-)\d+k?$", "", base_tag) or "latest"
    else:
        stem = name.model[: 80 - len("-agent")] + "-agent"
    tag = context_tag(context) if base_tag == "latest" else f"{base_tag}-{context_tag(context)}"
    return parse_name(f"{DEFAULT_HOST}/{namespace}/{stem}:{tag[-128:]}")


def trained_context(show: Mapping[str, Any]) -> int:
    """The training context from ``/api/show``'s model_info (0 when it is not there)."""
    info = show.get("model_info") or {}
    arch = info.get("general.architecture")
    value = info.get(f"{arch}.context_length") if arch else None
    return int(value) if isinstance(value, int) and value > 0 else 0


def param_context(show: Mapping[str, Any]) -> int:
    """A ``num_ctx`` the model's own Modelfile sets (0 when none)."""
    for line in str(show.get("parameters") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "num_ctx" and parts[1].isdigit():
            return int(parts[1])
    return 0


# -- the daemon's planner, asked --------------------------------------------------------
def candidates(asked: int, limit: int) -> list[int]:
    """The contexts ``choose`` may pick, largest first."""
    top = min(asked, limit) if limit > 0 else asked
    return [top, *(c for c in LADDER if c < top)]


def daemon_fit(client: Client, model: str, contexts: Sequence[int]) -> Callable[[int], Fit] | None:
    """``fit_at`` from the daemon's own planner (``/api/show`` with ``fit_contexts``), on
    the daemon's machine and store, wherever that is; None from a daemon that does not
    answer it (an older one): the wish is then asked for as is."""
    verdicts = client.show(model, fit_contexts=list(contexts), num_parallel=SLOTS).get("fit")
    if not verdicts:
        return None
    table = {v["context"]: Fit(v["fits"], v["on_gpu"], v["reason"]) for v in verdicts}
    return lambda context: table[context]
