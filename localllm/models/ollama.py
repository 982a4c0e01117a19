"""Ollama's side of model management: pulls from its registry, imports from its store.

``ModelService.pull_target`` resolves a name in this order, and ``pull`` says where it went:

1. an ``hf.co/…`` name is pulled from Hugging Face as it is;
2. a name stored here whose config has a registry ``origin`` (pulled from the registry,
   or imported from Ollama's own store), or a name written ``ollama://NAME``: from the
   registry (``lookup``);
3. the catalogue (``store/catalog.py``);
4. a name whose family the catalogue lacks (``qwen3.5``, ``user/model``): the registry
   (``fallback``); when the registry lacks it too, or cannot be reached, the catalogue's
   one-line error says so, with its closest names.

``LOCALLLM_OLLAMA_REGISTRY=off`` leaves the registry out of 2 and 4.  The download itself
is ``store/registry_pull.py``'s; ``fit_check`` is the planner's verdict on the header it
reads first, and ``plan`` a dry run of it, as ``remote.py`` gives them for the Hub.

An import from Ollama's own store (``localllm import ollama``, ``store/ollama_import.py``)
reports ``warnings`` for each model: what will not work as in Ollama.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from localllm.errors import InvalidRequest, ModelNotFound
from localllm.store import registry
from localllm.store.names import DEFAULT_HOST, ModelName

if TYPE_CHECKING:
    from localllm.api.wire import ProgressEvent
    from localllm.gguf.info import ModelInfo
    from localllm.models.remote import Machine
    from localllm.store.local import Store
    from localllm.store.ollama_store import Found
    from localllm.store.registry import Remote
    from localllm.store.registry_pull import Preflight

Progress = Callable[["ProgressEvent"], None]

FORCED = "ollama:// names Ollama's registry"
FOLLOWED = "where it was pulled from before"
NOT_IN_CATALOGUE = "not in the catalogue: from Ollama's registry"


def lookup(name: ModelName) -> Remote:
    """The registry's manifest of ``name``, which must be there (``ollama://``, an origin)."""
    base = registry.base_url()
    if not base:
        raise InvalidRequest(
            f"cannot pull {registry.SCHEME}{name.display}: Ollama's registry is off "
            "(LOCALLLM_OLLAMA_REGISTRY)"
        )
    return registry.fetch_manifest(name, base)


def fallback(name: ModelName, unknown: ModelNotFound) -> Remote:
    """The registry's manifest of a name the catalogue does not know; else ``unknown``,
    the catalogue's one-line error, saying what the registry answered."""
    base = registry.base_url()
    if not base or name.host.lower() != DEFAULT_HOST:
        raise unknown
    try:
        return registry.fetch_manifest(name, base)
    except registry.NotInRegistry:
        message = unknown.message.replace(
            " is not in the catalogue", " is not in the catalogue nor in Ollama's registry", 1
        )
        raise ModelNotFound(message) from None
    except registry.RegistryUnreachable as exc:
        raise ModelNotFound(f"{unknown.message} ({exc.message})") from None


def pull(
    store: Store,
    name: ModelName,
    remote: Remote,
    why: str,
    progress: Progress,
    *,
    cancel: threading.Event | None,
    machine: Callable[[], Machine] | None,
    force: bool | None,
    dry_run: bool,
    max_rate: int | None = None,
) -> None:
    """Pull ``remote`` as ``name``: checked to fit ``machine`` when given (``force``
    False: a model too big stops the pull, else it is a warning); ``max_rate``: the
    pull's own bandwidth cap in bytes/s.  ``dry_run``: the same steps, stopped once the
    header is read and planned (``plan``)."""
    from localllm.models.remote import Planned
    from localllm.store.registry_pull import pull_from_registry

    check: Preflight | None = None
    if dry_run:
        if machine is None:
            raise ValueError("a dry run needs the machine to plan on")
        check = plan(name, remote, machine, progress)
    elif machine is not None:
        check = fit_check(machine, force, progress, name.display)
    try:
        pull_from_registry(
            store,
            name,
            remote,
            progress,
            cancel=cancel,
            why=why,
            preflight=check,
            max_rate=max_rate,
        )
    except Planned:  # the dry run's stop, before any download
        pass


def plan(
    name: ModelName, remote: Remote, machine: Callable[[], Machine], progress: Progress
) -> Preflight:
    """The pull's hook for a dry run (``pull --dry-run``): the model's load planned here
    on the header the pull read by range requests, reported as the stream's last event,
    and the pull stopped (``Planned``) before anything is downloaded."""
    from localllm.errors import PullError
    from localllm.models.remote import Planned, dry_run_result
    from localllm.scheduler.fit import assess
    from localllm.store.manifests import Media

    def stop(source: str, info: ModelInfo | None, spent: int) -> None:
        if info is None:
            raise PullError(f"{source}: its header could not be read, so nothing was planned")
        here = machine()
        model, proj = remote.model, remote.manifest.first(Media.PROJECTOR)
        progress(
            dry_run_result(
                name.display,
                source,
                [{"file": f"model {model.digest[7:19]}", "size": model.size}],
                {"file": f"projector {proj.digest[7:19]}", "size": proj.size} if proj else None,
                size=sum(layer.size for layer in remote.manifest.layers),
                info=info,
                vision=proj is not None,
                fit=assess(info, here.devices, here.opts),
                header_bytes=spent,
            )
        )
        raise Planned

    return stop


def fit_check(
    machine: Callable[[], Machine], force: bool | None, progress: Progress, label: str
) -> Preflight:
    """The planner's verdict on a model's header before its download (see the module doc);
    a header that could not be read is said by the pull, which goes on."""
    from localllm.models.remote import judge
    from localllm.scheduler.fit import assess

    def check(source: str, info: ModelInfo | None, spent: int) -> None:
        if info is None:
            return
        progress({"status": "checking the model fits (reading its header)"})
        here = machine()
        judge(assess(info, here.devices, here.opts), source, force, progress, label)

    return check


# -- Ollama's own store ---------------------------------------------------------------------
def warnings(found: Found) -> list[str]:
    """What will not work as in Ollama about an imported model: a template our renderer
    refuses, parameters we ignore or refuse, malformed messages, Ollama's built-in
    renderers.  Warnings, not refusals: the weights are good, and ``create`` can fix the rest."""
    from localllm.api.options import OPTION_TYPES, merge_options
    from localllm.modelfile.checks import check_messages, check_template

    out: list[str] = []
    params = found.texts.get("params") or {}
    for key in params:
        if key not in OPTION_TYPES:
            out.append(f'parameter "{key}" is not supported here and is ignored')
    try:
        merge_options({k: v for k, v in params.items() if k in OPTION_TYPES}, None)
    except InvalidRequest as exc:
        out.append(f"its parameters are refused here: {exc.message}")
    try:
        messages = check_messages(found.texts.get("messages")) or []
    except InvalidRequest as exc:
        out.append(f"its MESSAGE history is refused here: {exc.message}")
        messages = []
    template = found.texts.get("template")
    if template:
        try:
            check_template(template, messages, found.texts.get("system"))
        except InvalidRequest as exc:
            out.append(f"{exc.message}: chats will fail until a new TEMPLATE replaces it")
    for key in ("renderer", "parser"):
        value = found.config.get(key)
        if isinstance(value, str) and value:
            out.append(
                f'Ollama uses its built-in "{value}" {key} for this model; localllm '
                f"uses the {'template' if template else 'GGUF chat template'} instead"
            )
    return out
