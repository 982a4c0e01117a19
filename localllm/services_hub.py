"""Hub use cases that need this machine's devices: a pull's dry run and preflight, and search.

Part of the model-management use cases (``services.py`` calls these): a
model on the Hub is judged before any download by reading its GGUF header(s)
over range requests (``store/remote.py``) and planning the load on the
devices a load would find (``scheduler/fit.py``, the planner itself):

* ``dry_run``: what ``pull NAME`` would fetch and how it would load here
  (``localllm pull --dry-run``, ``localllm show --remote``);
* ``preflight``: the check a real pull makes after choosing its files and
  before downloading them; a model too big for this machine stops the pull when
  the caller said ``force: false``, and is a warning in the progress otherwise;
* ``search``: ``store/search.py``'s repos with a fit for every quant, weights
  scaled from the one header read per repo.

``Machine`` is the devices and plan options; ``this_machine`` reads them (the
hardware probe may run a child process: call it off the event loop).  The probe's
answer is reused for ``MACHINE_TTL_S`` (RAM re-read each time, which is cheap), and
callers arriving during a probe wait for it: a burst of searches probes once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from localllm.api.wire import DryRun, FileSize, ProgressEvent, SearchModel, SearchResponse
from localllm.details import model_details
from localllm.errors import InvalidModelFile, LocalLLMError, PullError
from localllm.gguf.info import ModelInfo
from localllm.hardware.detect import Device, Hardware
from localllm.scheduler.fit import Fit, assess, describe, reclaimed, scaled, unknown
from localllm.scheduler.planner import LoadPlan, PlanOptions
from localllm.store import headercache, hub, search as hub_search

log = logging.getLogger(__name__)

Progress = Callable[[ProgressEvent], None]
MAX_TEMPLATE_PARSE = 64 << 10  # larger templates are judged by their text (render cap too)
MAX_INFO_TEXT = 4096  # longer header strings stay out of a dry run's model_info
MACHINE_TTL_S = 10.0  # how long one probe's devices serve searches and fit checks


class TooBig(PullError):
    """A pull refused before downloading: the model cannot load on this machine."""

    status = 409


@dataclass(frozen=True)
class Machine:
    devices: tuple[Device, ...]
    opts: PlanOptions


def this_machine(loaded: Iterable[LoadPlan] = ()) -> Machine:
    """This machine's devices as a new load would find them: fresh free memory, RPC
    workers that answer, and what ``loaded`` models hold counted as free (they would
    be evicted); the plan options from the daemon's settings, as a load uses them."""
    from localllm.hardware.rpc import endpoint_of

    hw = _hardware()
    ready = {w.endpoint for w in hw.workers if w.ready}
    devices = [d for d in hw.devices if (ep := endpoint_of(d.name)) is None or ep in ready]
    return Machine(tuple(reclaimed(devices, loaded)), PlanOptions.from_config())


_probe_lock = threading.Lock()
_probed: tuple[float, Hardware] | None = None  # (when, refresh_memory's answer)


def _hardware() -> Hardware:
    """``refresh_memory()``, reused for ``MACHINE_TTL_S`` with the RAM figure refreshed.

    On a GPU machine ``refresh_memory`` runs the probe child (about a second); one
    search per keystroke must not run one each.  The lock makes callers that arrive
    during a probe wait for its answer instead of starting their own.
    """
    global _probed
    from localllm.hardware.cpu import available_ram
    from localllm.hardware.detect import refresh_memory

    with _probe_lock:
        if _probed is None or time.monotonic() - _probed[0] > MACHINE_TTL_S:
            _probed = (time.monotonic(), refresh_memory())
            return _probed[1]
        hw = _probed[1]
    ram = available_ram()
    devices = tuple(replace(d, free=ram) if d.kind == "cpu" else d for d in hw.devices)
    return replace(hw, cpu=replace(hw.cpu, available_ram=ram), devices=devices)


def forget_machine() -> None:
    """Probe again on the next ``this_machine`` (tests; after a device change)."""
    global _probed
    with _probe_lock:
        _probed = None


@dataclass(frozen=True)
class RemotePlan:
    repo_id: str
    choice: hub.Choice
    projector: hub.HubFile | None
    info: ModelInfo
    fit: Fit
    header_bytes: int  # transferred to read the header(s)
    vision: bool  # the projector is a clip GGUF


def plan_choice(
    repo_id: str, choice: hub.Choice, mmproj: hub.HubFile | None, machine: Machine
) -> RemotePlan:
    """Read the chosen files' headers (and the projector's) and plan the load."""
    from localllm.scheduler.projector import header_cost

    info, got = headercache.read_model_info(repo_id, choice.files)
    spent, opts, vision = got.bytes_read, machine.opts, False
    if mmproj is not None:
        proj = headercache.read_headers(repo_id, [mmproj])
        spent += proj.bytes_read
        if proj.headers[0].kv.get("general.architecture") == "clip":
            vision = True
            fa = opts.flash_attention.lower() not in ("off", "0", "false", "no")
            cost = header_cost(proj.headers[0], fa)
            opts = replace(opts, projector_weights=cost.weights, projector_compute=cost.compute)
    fit = assess(info, machine.devices, opts)
    return RemotePlan(repo_id, choice, mmproj, info, fit, spent, vision)


def template_caps(template: str) -> list[str]:
    """``tools`` / ``thinking`` from a remote chat template; one past the render cap is
    judged by its text rather than parsed."""
    from localllm.template.caps import template_capabilities

    if len(template) <= MAX_TEMPLATE_PARSE:
        return template_capabilities(template)
    low = template.lower()
    return [
        c
        for c, marks in (("tools", ("tools",)), ("thinking", ("<think>", "thinking")))
        if any(m in low for m in marks)
    ]


def capabilities(
    template: str, *, embedding: bool, vision: bool, rerank: bool = False
) -> list[str]:
    caps = (
        ["rerank"]
        if rerank
        else ["embedding"]
        if embedding
        else ["completion", *template_caps(template)]
    )
    return [*caps, "vision"] if vision else caps


def dry_run_result(name: str, plan: RemotePlan) -> DryRun:
    """The last event of a dry-run pull: the files, the model and the fit."""
    info, choice = plan.info, plan.choice
    files: list[FileSize] = [{"file": f.path, "size": f.size} for f in choice.files]
    proj: FileSize | None = (
        {"file": plan.projector.path, "size": plan.projector.size} if plan.projector else None
    )
    size = sum(f.size for f in choice.files) + (plan.projector.size if plan.projector else 0)
    # The header's scalar keys, as show's model_info; long texts (a licence) left out.
    kv = {
        k: v
        for k, v in info.kv.items()
        if not k.startswith("tokenizer.")
        and isinstance(v, (int, float, str, bool))
        and not (isinstance(v, str) and len(v) > MAX_INFO_TEXT)
    }
    return {
        "status": "success",
        "dry_run": True,
        "model": name,
        "source": f"hf.co/{plan.repo_id}:{choice.label}",
        "files": files,
        "projector": proj,
        "size": size,
        "details": model_details(info, brief=True),
        "model_info": kv,
        "context_length": info.context_length,
        "capabilities": capabilities(
            info.chat_template or "",
            embedding=info.pooling_type is not None,
            vision=plan.vision,
            rerank=info.rank_head,
        ),
        "fit": plan.fit.to_json(),
        "header_bytes": plan.header_bytes,
    }


def dry_run(
    name: str,
    source: str,
    projector: str | None,
    machine: Callable[[], Machine],
    progress: Progress,
) -> None:
    """A pull that stops before downloading: the same name resolution, listing and
    choice of files as ``pull_model``, then ``dry_run_result`` as the last event."""
    from localllm.store import projector as proj
    from localllm.store.names import parse_name

    src = parse_name(source)
    repo_id = f"{src.namespace}/{src.model}"
    progress({"status": "pulling manifest"})
    if parse_name(name).key() != src.key():
        progress({"status": f"{name} is {src.display}"})
    listing = hub.list_repo(repo_id)
    choice = hub.choose(repo_id, listing, src.tag)
    mmproj = proj.choose_projector(repo_id, listing, choice.label, projector, choice.files[0].path)
    progress(
        {
            "status": f"using {choice.label} ({choice.how}): "
            + ", ".join(f.path for f in choice.files)
        }
    )
    progress({"status": "reading the header with range requests (dry run: nothing is downloaded)"})
    progress(dry_run_result(name, plan_choice(repo_id, choice, mmproj, machine())))


def preflight(
    machine: Callable[[], Machine], force: bool | None, progress: Progress, name: str = ""
) -> Callable[[str, hub.Choice, hub.HubFile | None], None]:
    """The check ``pull_model`` runs before downloading (see the module doc).

    A header that cannot be read (the Hub, a range refused) is said and the pull goes
    on: the download is verified anyway.  A header our reader refuses stops it.
    """

    def check(repo_id: str, choice: hub.Choice, mmproj: hub.HubFile | None) -> None:
        progress({"status": "checking the model fits (reading its header)"})
        try:
            got = plan_choice(repo_id, choice, mmproj, machine())
        except InvalidModelFile as exc:
            raise InvalidModelFile(f"not pulling hf.co/{repo_id}:{choice.label}: {exc}") from None
        except LocalLLMError as exc:
            progress({"status": f"could not check the fit before downloading: {exc}"})
            return
        fit = got.fit
        if fit.status != "too_big":
            progress({"status": f"fits: {describe(fit)}"})
            return
        text = f"hf.co/{repo_id}:{choice.label} does not fit on this machine ({describe(fit)})"
        if force is False:
            again = f"localllm pull {name} --force" if name else "--force"
            raise TooBig(f'{text}; to pull it anyway: {again} (API: "force": true)')
        progress({"status": f"warning: {text}"})

    return check


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


# -- search -----------------------------------------------------------------------------------
def _catalog_entries() -> list[tuple[str, str]]:
    """The library catalogue as (name, repo) pairs: ``llama3.2:1b`` and, for the tag
    ``latest`` names, ``llama3.2``.  A catalogue that cannot be read adds nothing."""
    from localllm.store import catalog

    try:
        cat = catalog.load()
    except LocalLLMError as exc:
        log.warning("search without the catalogue: %s", exc)
        return []
    out = []
    for fam in cat.families.values():
        for tag, entry in fam.tags.items():
            repo = f"{entry.source.namespace}/{entry.source.model}"
            out.append((f"{fam.name}:{tag}", repo))
            if tag == fam.latest:
                out.append((fam.name, repo))
    return out


def _quant_fit(r: hub_search.Repo, q: hub_search.Quant, machine: Machine) -> Fit:
    if r.info is None:
        return unknown(r.error or "the header was not read in time")
    info = r.info if q is r.read_from else scaled(r.info, q.size, r.data_bytes)
    return assess(info, machine.devices, machine.opts, find_max_context=False)


def search(
    query: str,
    limit: int,
    machine: Callable[[], Machine],
    catalog: Callable[[], list[tuple[str, str]]] = _catalog_entries,
    deadline_s: float = hub_search.DEADLINE_S,
) -> SearchResponse:
    """``GET /api/search``'s answer (see docs/api.md)."""
    repos = hub_search.search(query, limit, catalog=catalog, deadline_s=deadline_s)
    here = machine()
    models: list[SearchModel] = []
    for r in repos:
        info = r.info
        # The Hub's reading of the template, else our own from the header.
        template = _str(r.gguf.get("chat_template")) or _str(info and info.chat_template)
        embedding = r.pipeline_tag in ("feature-extraction", "sentence-similarity") or (
            info is not None and info.pooling_type is not None
        )
        ctx = r.gguf.get("context_length")
        models.append(
            {
                "name": f"hf.co/{r.repo}",
                "repo": r.repo,
                "catalog": r.catalog,
                "base_models": r.base_models,
                "downloads": r.downloads,
                "likes": r.likes,
                "updated": r.updated,
                "capabilities": capabilities(
                    template,
                    embedding=embedding,
                    vision=bool(r.projectors),
                    rerank=r.pipeline_tag == "text-ranking"
                    or (info is not None and info.rank_head),
                ),
                "context_length": ctx
                if isinstance(ctx, int) and ctx > 0
                else (info.context_length if info is not None and info.context_length else None),
                "quants": [
                    {
                        "tag": q.tag,
                        "files": [f.path for f in q.files],
                        "size": q.size,
                        "fit": _quant_fit(r, q, here).to_json(),
                    }
                    for q in r.quants or []
                ],
                "error": r.error or None,
            }
        )
    return {"models": models}
