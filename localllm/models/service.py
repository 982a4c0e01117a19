"""Model-management use cases over the store: list, show, copy, delete, pull.

Routes (and anything else in the daemon) call these; they validate names and
digests, talk to the ``Store`` and return plain JSON-ready values, raising
``localllm.errors`` types.  Everything here is synchronous: routes run it in a
worker thread, pulls in their own thread.  What a pull from the Hub makes of this
machine is ``remote.py``'s (the fit check, the dry run), a pull from Ollama's
registry and an import from its store ``ollama.py``'s.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from localllm.api.wire import (
    Details,
    Draft,
    JSONObject,
    JSONValue,
    ProgressEvent,
    ShowResponse,
    TagsEntry,
)
from localllm.models.details import capabilities, model_details, rfc3339
from localllm.store.local import PartialsReport, Store
from localllm.store.manifests import Entry, Media
from localllm.store.names import ModelName, parse_digest, parse_name

if TYPE_CHECKING:
    from localllm.gguf.info import ModelInfo
    from localllm.models.remote import Machine
    from localllm.store.ollama_import import ImportReport
    from localllm.store.progress import Progress as ImportProgress
    from localllm.store.registry import Remote

log = logging.getLogger(__name__)

# Where a pull's progress events go (a route's NDJSON stream, a create's relay): the
# store's pull lines and a dry run's result.
Progress = Callable[[ProgressEvent], None]


@dataclass(frozen=True)
class PullTarget:
    """A pull resolved: stored as ``name``, fetched from ``source`` (an ``hf.co`` name),
    or from Ollama's registry when ``registry`` holds its manifest (``ollama.py``)."""

    name: ModelName
    source: ModelName
    projector: str | None  # the catalogue's projector choice, if it makes one
    via: str | None  # the catalogue entry, "llama3.2:3b", or why the registry
    registry: Remote | None = None


def format_parameters(params: Mapping[str, object]) -> str:
    """The ``parameters`` text of ``/api/show``: one ``name value`` line per value."""
    lines = []
    for key, value in params.items():
        for item in value if isinstance(value, list) else [value]:
            lines.append(f"{key:<30} {_param_value(item)}")
    return "\n".join(lines)


def _param_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _jsonable(value: object) -> JSONValue:
    """GGUF metadata may hold numpy scalars or bytes; keep JSON output well-formed."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    item = getattr(value, "item", None)
    if callable(item):
        return _jsonable(item())
    return str(value)


def prune_partials(store: Store, daemon_pid_file: Path, *, dry_run: bool = False) -> PartialsReport:
    """Remove resumable partial downloads nobody is writing (``localllm prune --partials``).

    Runs without the daemon (it only touches files); the daemon's pid file tells
    whether one is running, whose pulls may own a partial (see ``Store.prune_partials``).
    """
    try:
        daemon_pid: int | None = int(daemon_pid_file.read_text().strip())
    except (OSError, ValueError):
        daemon_pid = None
    return store.prune_partials(daemon_pid=daemon_pid, dry_run=dry_run)


class ModelService:
    """Model-management operations over one ``Store``."""

    def __init__(
        self, store: Store, unload: Callable[[str], Awaitable[object]] | None = None
    ) -> None:
        self.store = store
        # Ends a loaded model's runner (the inference service's unload), so a
        # deleted model stops serving, as Ollama's rm does.
        self.unload = unload

    # -- reading -------------------------------------------------------------
    def details(self, entry: Entry) -> Details:
        return model_details(None, self.store.config_json(entry))

    def list_models(self) -> list[TagsEntry]:
        out: list[TagsEntry] = []
        for entry in self.store.list():
            display = entry.name.display
            out.append(
                {
                    "name": display,
                    "model": display,
                    "modified_at": rfc3339(entry.modified),
                    "size": entry.manifest.total_size,
                    "digest": entry.digest.removeprefix("sha256:"),
                    "details": self.details(entry),
                }
            )
        return out

    def show(self, model: str, *, verbose: bool = False) -> ShowResponse:
        # One writer for Modelfiles (the parser's twin), so the text round-trips through create.
        from localllm.modelfile.show import modelfile_text

        name = parse_name(model)
        entry = self.store.get(name)
        info = self._model_info(entry)
        # Manifests written without a rich config still get useful details (the header's).
        details = model_details(info, self.store.config_json(entry))
        model_info: JSONObject = {}
        chat_template = ""
        embedding = rerank = False
        if info is not None:
            model_info = {str(k): _jsonable(v) for k, v in info.kv.items()}
            model_info.setdefault("general.architecture", info.architecture)
            model_info.setdefault("general.parameter_count", info.parameter_count)
            chat_template = info.chat_template or ""
            embedding = info.pooling_type is not None
            rerank = info.rank_head
        template = self.store.template(entry) or chat_template
        system = self.store.system(entry) or ""
        params = self.store.params(entry)
        licenses = [
            self.store.blobs.read_bytes(layer.digest).decode("utf-8", "replace")
            for layer in entry.manifest.by_type(Media.LICENSE)
        ]
        projector_info = self._projector_info(entry)
        out: ShowResponse = {
            "modelfile": modelfile_text(self.store, entry),
            "parameters": format_parameters(params),
            "template": template,
            "system": system,
            "license": "\n".join(licenses),
            "details": details,
            "model_info": model_info,
            "capabilities": capabilities(
                template,
                embedding=embedding,
                vision=projector_info is not None,
                rerank=rerank,
            ),
            "modified_at": rfc3339(entry.modified),
        }
        if projector_info is not None:
            out["projector_info"] = projector_info
        # Ours, not Ollama's: where a pulled model came from (hf.co/…:quant, files, digests).
        origin = self.store.config_json(entry).get("origin")
        if isinstance(origin, dict):
            out["origin"] = origin
        draft = self._draft(entry)
        if draft is not None:
            out["draft"] = draft
        return out

    def _draft(self, entry: Entry) -> Draft | None:
        """The draft model (Modelfile ``DRAFT``; ours): its blob and, from its GGUF
        header, the details ``/api/show`` gives for a model."""
        from localllm.errors import InvalidModelFile
        from localllm.gguf.info import read_model_info

        layer = entry.manifest.first(Media.DRAFT)
        if layer is None:
            return None
        info: ModelInfo | None = None
        try:
            info = read_model_info(self.store.blobs.path(layer.digest))
        except (InvalidModelFile, OSError) as exc:
            log.warning("%s: draft model not readable: %s", entry.name.display, exc)
        return {
            "digest": layer.digest,
            "size": layer.size,
            "details": model_details(info, brief=True),
        }

    def _projector_info(self, entry: Entry) -> JSONObject | None:
        """The projector's GGUF key/values (Ollama's ``projector_info``), or None when the
        model has no projector or it is not a clip GGUF that could load: then ``vision``
        would be a false promise."""
        from localllm.errors import InvalidModelFile
        from localllm.store.projector import projector_header

        path = self.store.projector_path(entry)
        if path is None:
            return None
        try:
            kv = projector_header(path)
        except (InvalidModelFile, OSError) as exc:
            log.warning("%s: projector not usable: %s", entry.name.display, exc)
            return None
        return {k: _jsonable(v) for k, v in kv.items()}

    def _model_info(self, entry: Entry) -> ModelInfo:
        from localllm.gguf.info import read_model_info_split  # one shard or several

        return read_model_info_split(self.store.model_paths(entry))

    # -- changing ------------------------------------------------------------
    def copy(self, source: str, destination: str) -> None:
        src = parse_name(source)
        dst = parse_name(destination)
        self.store.copy(src, dst)

    def delete(self, model: str) -> None:
        """Remove ``model`` from the store (see ``remove`` for a daemon with loaded models)."""
        self.store.delete(parse_name(model))

    async def remove(self, model: str) -> None:
        """Unload ``model`` if it is loaded, then delete it; 404 / 400 before anything changes."""
        import anyio

        self.store.get(parse_name(model))
        if self.unload is not None:
            await self.unload(model)
        await anyio.to_thread.run_sync(self.delete, model)

    def pull_target(self, model: str) -> PullTarget:
        """What pulling ``model`` fetches: an ``hf.co`` name itself, the catalogue's entry
        for a library name (``llama3.2``), else Ollama's registry (``ollama://NAME``
        forces it); errors before anything is downloaded.  The order is
        ``models/ollama.py``'s docstring.

        A name already in the store that no pull wrote (a model created here) is refused
        rather than replaced: pulling must not destroy it.  One with an origin is
        updated from where it came.
        """
        from localllm.errors import InvalidRequest, ModelNotFound
        from localllm.models import ollama as reg
        from localllm.store import catalog
        from localllm.store.registry import split_scheme

        raw, forced = split_scheme(model)
        name = parse_name(raw)
        if name.is_hf:
            if forced:
                raise InvalidRequest(f"'{raw}' is a Hugging Face name, not one of Ollama's")
            return PullTarget(name, name, None, None)
        origin = None
        if self.store.manifests.exists(name):
            origin = self.store.config_json(self.store.get(name)).get("origin")
            if not isinstance(origin, dict):
                raise InvalidRequest(
                    f"'{name.display}' is a model made here, not pulled: pulling would replace "
                    f"it. Remove it first (localllm rm {name.display}) or copy it to another "
                    "name",
                    status=409,
                )
        if forced or (origin and origin.get("registry")):
            return PullTarget(
                name, name, None, reg.FORCED if forced else reg.FOLLOWED, reg.lookup(name)
            )
        try:
            found = catalog.resolve(name)
        except ModelNotFound as exc:
            if catalog.load().family(name) is not None:
                raise  # a family it has, with a tag it lacks
            return PullTarget(name, name, None, reg.NOT_IN_CATALOGUE, reg.fallback(name, exc))
        assert found is not None  # resolve() raises for library names it lacks
        return PullTarget(name, found.source, found.projector, found.name)

    def pull(
        self,
        model: str,
        progress: Progress,
        *,
        cancel: threading.Event | None = None,
        projector: str | None = None,
        machine: Callable[[], Machine] | None = None,
        force: bool | None = None,
        dry_run: bool = False,
        max_rate: int | None = None,
    ) -> None:
        """``projector``: a projector file or precision to pull instead of the automatic
        choice, or ``"none"`` (see ``store/projector.py``).  ``model`` may be a library
        name from the catalogue (see ``pull_target``).  ``max_rate``: the pull's bandwidth
        cap in bytes/s (``store/ratelimit.py``).

        With ``machine`` (the devices a load would find) the model's header is read
        over range requests before downloading and planned: ``dry_run`` stops there
        and reports it; a model too big for the machine stops the pull if ``force`` is
        False, else is a warning (``remote.py``, ``ollama.py``).
        """
        from localllm.models import ollama, remote
        from localllm.store.pull import Preflight, pull_model

        target = self.pull_target(model)
        if target.registry is not None:
            ollama.pull(
                self.store,
                target.name,
                target.registry,
                target.via or "",
                progress,
                cancel=cancel,
                machine=machine,
                force=force,
                dry_run=dry_run,
                max_rate=max_rate,
            )
            return
        check: Preflight | None = None
        if dry_run:
            if machine is None:
                raise ValueError("a dry run needs the machine to plan on")
            check = remote.dry_run(target.name.display, machine, progress)
        elif machine is not None:
            check = remote.preflight(machine, force, progress, model)
        try:
            pull_model(
                self.store,
                target.name,
                progress,
                cancel=cancel,
                projector=projector or target.projector,
                source=None if target.source is target.name else target.source,
                # A dry run's lines name no catalogue entry (the result's source says it).
                via=None if dry_run else target.via,
                preflight=check,
                max_rate=max_rate,
            )
        except remote.Planned:  # the dry run's stop, before any download
            pass

    def blob_exists(self, digest: str) -> bool:
        return self.store.blobs.exists(parse_digest(digest))

    def import_ollama(
        self,
        source: Path | None,
        *,
        models: Iterable[str] = (),
        copy: bool = False,
        dry_run: bool = False,
        force: bool = False,
        progress: ImportProgress | None = None,
    ) -> ImportReport:
        """Bring in the models of an Ollama store (``localllm import ollama``): ``source``,
        else Ollama's own folder; only ``models`` when given.  Blobs are hard-linked where
        they can be, else copied (``copy``: always), and verified either way; see
        ``store/ollama_import.py``.  Needs no daemon: it only adds blobs and manifests.
        Each model gets ``ollama.warnings``: what will not work as in Ollama."""
        from localllm.models.ollama import warnings
        from localllm.store.ollama_import import import_ollama

        return import_ollama(
            self.store,
            source,
            names=[parse_name(m) for m in models],
            copy=copy,
            dry_run=dry_run,
            force=force,
            progress=progress,
            check=warnings,
        )
