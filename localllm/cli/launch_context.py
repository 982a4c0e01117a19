"""How much context ``localllm launch`` gives an agent, and the model that carries it.

Agents send 10-30k-token system prompts and never send ``num_ctx``, so the
context has to belong to the model they name: ``agent_model`` derives
``NAME-agent:<ctx>`` (Modelfile ``PARAMETER num_ctx``, one slot), and every
request to it, from any client, loads the model with that context.

``choose`` picks the context: the largest from the agent's wish down that the
planner says fits, all layers on the GPUs first, at least ``AGENT_FLOOR`` tokens
where that fits at all, never past the model's own training context.  An
explicit ``num_ctx`` is loaded as asked (the planner only shrinks automatic
contexts), so the fit is judged before the load: ``local_fit`` runs the
daemon's own placement (``scheduler.placement``) on this machine's devices, with
the memory of the models the daemon holds counted as free (the scheduler evicts
them to make room).  That needs the daemon to be on this machine and to share
its model store; otherwise the wish is asked for as is, and ``ps`` shows what
was loaded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from localllm.errors import LocalLLMError
from localllm.store.names import DEFAULT_HOST, DEFAULT_NAMESPACE, ModelName, parse_name

if TYPE_CHECKING:
    from localllm.api.client import Client
    from localllm.api.wire import PsEntry, TagsEntry

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
    candidates = [top, *(c for c in LADDER if c < top)]
    verdicts = [(c, fit_at(c)) for c in candidates]
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
        f"{candidates[-1]}-token context ({smallest.reason}); "
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


# -- the daemon's planner, run here ---------------------------------------------------
def _freed(devices: Sequence[Any], loaded: Sequence[PsEntry]) -> list[Any]:
    """``devices`` with the bytes the loaded models hold (``/api/ps`` devices) counted free."""
    held: dict[str, int] = {}
    for m in loaded:
        for place, n in (m.get("devices") or {}).items():
            if isinstance(n, int):
                held[str(place)] = held.get(str(place), 0) + n
    return [replace(d, free=min(d.total, d.free + held.get(d.name, 0))) for d in devices]


def _same(listed: TagsEntry, key: tuple[str, ...], digest: str) -> bool:
    try:
        return parse_name(listed.get("name")).key() == key and listed.get("digest") == digest
    except LocalLLMError:
        return False


def local_fit(client: Client, model: str) -> Callable[[int], Fit] | None:
    """``fit_at`` for ``model`` on this machine, or None when the daemon is elsewhere."""
    from localllm.api.daemon import is_local_url

    if not is_local_url(client.base_url):
        return None
    from localllm import paths
    from localllm.api.options import resolve_options
    from localllm.hardware.detect import detect
    from localllm.inference.service import InferenceService, base_load
    from localllm.scheduler.placement import make_plan_fn
    from localllm.store.local import Store

    try:
        target = InferenceService(Store(paths.models()), None).target(model)  # type: ignore[arg-type]
    except (OSError, LocalLLMError):
        return None
    # The daemon may use another store (another LOCALLLM_HOME): plan only the same model.
    digest = target.entry.digest.removeprefix("sha256:")
    wanted = parse_name(model).key()
    if not any(_same(m, wanted, digest) for m in client.list()):
        return None
    hw = detect()
    hw = replace(hw, devices=tuple(_freed(hw.devices, client.ps())))
    has_gpu = any(d.is_gpu for d in hw.devices)
    plan_fn = make_plan_fn(lambda: hw)

    def fit_at(context: int) -> Fit:
        params = {**target.params, "num_ctx": context, "num_parallel": SLOTS}
        load = base_load(resolve_options(params, None, has_draft=target.spec.draft is not None))
        load = replace(load, projector=target.spec.projector, draft=target.spec.draft)
        placement = plan_fn(target.spec, load, [])
        plan = placement.plan
        on_gpu = not has_gpu or bool(plan is not None and plan.fully_offloaded)
        return Fit(placement.fits, on_gpu, placement.reason)

    return fit_at
