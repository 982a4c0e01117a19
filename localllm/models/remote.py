"""Will a model on the Hub fit here, judged before any download: the fit check and the dry run.

A model is judged by reading its GGUF header(s) over range requests
(``store/headercache.py``) and planning the load on the devices a load would
find (``scheduler/fit.py``, the planner itself).  Both are hooks of the pull
(``store/pull.py``'s ``preflight``), run once the pull has resolved the name,
listed the repo and chosen the files, and before it downloads anything:

* ``preflight``: a model too big for this machine stops the pull when the
  caller said ``force: false``, and is a warning in the progress otherwise;
* ``dry_run``: reports the plan as the pull's last event and stops the pull
  there (``Planned``), so ``pull --dry-run`` and ``show --remote`` take exactly
  the steps a pull takes, not a second walk of them.

``dry_run_result`` and ``judge`` are shared with Ollama's registry (``ollama.py``).
``Machine`` is the devices and plan options; ``this_machine`` reads them (the
hardware probe may run a child process: call it off the event loop).  The probe's
answer is reused for ``MACHINE_TTL_S`` (RAM re-read each time, which is cheap), and
callers arriving during a probe wait for it: a burst of searches probes once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from localllm.api.wire import DryRun, FileSize, JSONObject, ProgressEvent
from localllm.errors import InvalidModelFile, LocalLLMError, PullError
from localllm.gguf.info import ModelInfo
from localllm.hardware.detect import Device, Hardware
from localllm.models.details import capabilities, model_details
from localllm.scheduler.fit import Fit, assess, describe, reclaimed
from localllm.scheduler.planner import LoadPlan, PlanOptions
from localllm.store import headercache, hub
from localllm.store.pull import Preflight

Progress = Callable[[ProgressEvent], None]
MAX_INFO_TEXT = 4096  # longer header strings stay out of a dry run's model_info
MACHINE_TTL_S = 10.0  # how long one probe's devices serve searches and fit checks


class TooBig(PullError):
    """A pull refused before downloading: the model cannot load on this machine."""

    status = 409


class Planned(Exception):
    """A dry run's stop: the pull's first steps are done and the plan reported."""


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


def header_facts(info: ModelInfo) -> JSONObject:
    """The header's scalar keys, as show's ``model_info``; long texts (a licence) left out."""
    return {
        k: v
        for k, v in info.kv.items()
        if not k.startswith("tokenizer.")
        and isinstance(v, (int, float, str, bool))
        and not (isinstance(v, str) and len(v) > MAX_INFO_TEXT)
    }


def dry_run_result(
    name: str,
    source: str,
    files: list[FileSize],
    projector: FileSize | None,
    *,
    size: int,
    info: ModelInfo,
    vision: bool,
    fit: Fit,
    header_bytes: int,
) -> DryRun:
    """The last event of a dry-run pull, from the Hub or Ollama's registry: the files,
    the model and the fit (docs/api.md)."""
    return {
        "status": "success",
        "dry_run": True,
        "model": name,
        "source": source,
        "files": files,
        "projector": projector,
        "size": size,
        "details": model_details(info, brief=True),
        "model_info": header_facts(info),
        "context_length": info.context_length,
        "capabilities": capabilities(
            info.chat_template or "",
            embedding=info.pooling_type is not None,
            vision=vision,
            rerank=info.rank_head,
        ),
        "fit": fit.to_json(),
        "header_bytes": header_bytes,
    }


def _hub_result(name: str, plan: RemotePlan) -> DryRun:
    choice, mmproj = plan.choice, plan.projector
    files: list[FileSize] = [{"file": f.path, "size": f.size} for f in choice.files]
    proj: FileSize | None = {"file": mmproj.path, "size": mmproj.size} if mmproj else None
    return dry_run_result(
        name,
        f"hf.co/{plan.repo_id}:{choice.label}",
        files,
        proj,
        size=sum(f.size for f in choice.files) + (mmproj.size if mmproj else 0),
        info=plan.info,
        vision=plan.vision,
        fit=plan.fit,
        header_bytes=plan.header_bytes,
    )


def dry_run(name: str, machine: Callable[[], Machine], progress: Progress) -> Preflight:
    """The pull's hook for a dry run: once the pull has chosen its files, read their
    headers, plan, report the result as the last event and stop the pull (``Planned``,
    which the caller catches) before anything is downloaded."""

    def stop(repo_id: str, choice: hub.Choice, mmproj: hub.HubFile | None) -> None:
        progress(
            {"status": "reading the header with range requests (dry run: nothing is downloaded)"}
        )
        progress(_hub_result(name, plan_choice(repo_id, choice, mmproj, machine())))
        raise Planned

    return stop


def judge(fit: Fit, what: str, force: bool | None, progress: Progress, label: str) -> None:
    """The fit check's verdict on ``what`` (a source name): fits, a warning, or ``TooBig``
    when ``force`` is False (``label``: the name to pull again with ``--force``)."""
    if fit.status != "too_big":
        progress({"status": f"fits: {describe(fit)}"})
        return
    text = f"{what} does not fit on this machine ({describe(fit)})"
    if force is False:
        again = f"localllm pull {label} --force" if label else "--force"
        raise TooBig(f'{text}; to pull it anyway: {again} (API: "force": true)')
    progress({"status": f"warning: {text}"})


def preflight(
    machine: Callable[[], Machine], force: bool | None, progress: Progress, name: str = ""
) -> Preflight:
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
        judge(got.fit, f"hf.co/{repo_id}:{choice.label}", force, progress, name)

    return check
