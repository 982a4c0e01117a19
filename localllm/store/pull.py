"""Pull a model into the store: resolve, download every layer, describe it, commit the manifest.

``pull_model`` is synchronous (the server runs it in a thread) and reports
progress with the same dicts as Ollama's ``/api/pull`` stream:
``pulling manifest`` → ``pulling <12 hex>`` (digest, total, completed) →
``verifying sha256 digest`` → ``writing manifest`` → ``success``.  The
manifest is written last, so a failed or cancelled pull leaves no model
behind (completed blobs stay for the next try; partials stay for resume).

What is pulled is an ``hf.co/{user}/{repo}[:{quant}]`` name, ``source``: the
name itself, or what a library name (``llama3.2``) resolves to in the catalogue
(``store/catalog.py``); the model is stored under ``name``, as typed, and its
config blob records the ``origin`` (``hf.co/…:Q4_K_M``, files and digests) that
``show`` reports.  The Hub is listed
with ``huggingface_hub`` (``store/hub.py``) and files are downloaded by our own
verifying, resuming downloader (``store/download.py``).  A repo's vision
projector (``mmproj*.gguf``) becomes a projector layer (``store/projector.py``
chooses which one; ``projector=`` overrides, ``"none"`` skips it).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NotRequired, TypeAlias, TypedDict

from localllm import tls
from localllm.api.wire import JSONObject
from localllm.errors import InvalidModelFile, InvalidRequest, PullError
from localllm.gguf.info import ModelInfo, read_model_info_split
from localllm.store import download, hub, projector as proj, ratelimit
from localllm.store.importer import config_for
from localllm.store.local import Hold, Store
from localllm.store.manifests import Entry, Layer, Manifest, Media
from localllm.store.names import ModelName, parse_digest

if TYPE_CHECKING:
    from localllm.api.wire import Progress

# Where the progress goes: Ollama's /api/pull lines (named for mypy only: no import of api/).
ProgressFn: TypeAlias = "Callable[[Progress], None]"
Preflight = Callable[[str, hub.Choice, hub.HubFile | None], None]
MAX_EXTRA_BYTES = 1 << 20  # template / system / params files from the repo


def pull_model(
    store: Store,
    name: ModelName,
    progress: ProgressFn,
    *,
    cancel: threading.Event | None = None,
    projector: str | None = None,
    source: ModelName | None = None,
    via: str | None = None,
    preflight: Preflight | None = None,
    max_rate: int | None = None,
) -> Entry:
    """Pull ``source`` (default: ``name``) into ``store`` as ``name`` and return its entry;
    see the module docstring.

    ``projector``: the projector file (or precision label) to take instead of
    the automatic choice, or ``"none"`` for none.  ``via``: the catalogue entry
    (``llama3.2:3b``) that led from ``name`` to ``source``, recorded in the origin.
    ``preflight(repo_id, choice, projector_file)`` runs once the files are chosen and
    before any is downloaded; raising stops the pull (models/remote.py: will it fit; a
    dry run stops there).
    ``max_rate``: this pull's bandwidth cap in bytes/s, shared by its files (store/ratelimit.py).
    """
    source = name if source is None else source
    repo_id, choice, mmproj = _choose(name, source, via, projector, progress)
    if preflight is not None:
        preflight(repo_id, choice, mmproj)

    from huggingface_hub.utils import build_hf_headers

    headers = build_hf_headers(token=hub.token())
    # Every blob this pull finds or writes is held until it ends: a delete of the same
    # model meanwhile must not collect what the manifest is about to reference.
    hold = store.hold()
    try:
        fetcher = _Fetcher(
            store, repo_id, headers, progress, cancel, hold, ratelimit.for_pull(max_rate)
        )
        layers = fetcher.layers(choice, mmproj)
        progress({"status": "verifying sha256 digest"})
        info = _model_info(store, [x for x in layers if x.media_type == Media.MODEL])
        layers = _check_projector(store, layers, progress, explicit=bool(projector))
        layers += _extra_layers(store, repo_id, choice, headers, info, hold)
        origin = _origin(repo_id, choice, mmproj, layers, via)
        config = store.put_config({**config_for(info), "origin": origin}, hold=hold)
        _check_cancel(cancel)
        return _commit(store, name, Manifest(config, layers), progress)
    finally:
        hold.release()


def _choose(
    name: ModelName,
    source: ModelName,
    via: str | None,
    projector: str | None,
    progress: ProgressFn,
) -> tuple[str, hub.Choice, hub.HubFile | None]:
    """List ``source``'s Hub repo and choose its model files and projector, saying which:
    (repo id, the choice, the projector file or None).  Nothing is downloaded yet."""
    if not source.is_hf:
        raise InvalidRequest(
            f"cannot pull '{source.display}': only Hugging Face models can be pulled, "
            f"named hf.co/{{user}}/{{repo}}[:{{quant}}]"
        )
    progress({"status": "pulling manifest"})
    if source is not name:
        progress(
            {
                "status": f"{name.display} is {source.display}"
                + (f" (catalogue entry {via})" if via else "")
            }
        )
    repo_id = f"{source.namespace}/{source.model}"
    listing = hub.list_repo(repo_id)
    choice = hub.choose(repo_id, listing, source.tag)
    # Chosen before any download, so a projector name that matches nothing fails fast.
    mmproj = proj.choose_projector(repo_id, listing, choice.label, projector, choice.files[0].path)
    files = ", ".join(f.path for f in choice.files)
    progress({"status": f"using {choice.label} ({choice.how}): {files}"})
    if mmproj is not None:
        progress({"status": f"using projector {mmproj.path}"})
    return repo_id, choice, mmproj


@dataclass(frozen=True)
class _Fetcher:
    """Downloads one pull's files from its repo into the store: each blob held before it
    is looked for, its progress reported, the pull's cancel and rate cap obeyed."""

    store: Store
    repo_id: str
    headers: dict[str, str]
    progress: ProgressFn
    cancel: threading.Event | None
    hold: Hold
    limit: ratelimit.Bucket | None

    def layers(self, choice: hub.Choice, mmproj: hub.HubFile | None) -> list[Layer]:
        """The model layers (a split model's shards named by file) and the projector's."""
        split = len(choice.files) > 1
        layers = [
            Layer(Media.MODEL, self.fetch(f), f.size, f.filename if split else None)
            for f in choice.files
        ]
        if mmproj is not None:
            layers.append(Layer(Media.PROJECTOR, self.fetch(mmproj), mmproj.size, mmproj.filename))
        return layers

    def fetch(self, f: hub.HubFile) -> str:
        """Make sure ``f`` is a blob in the store; its digest."""
        from huggingface_hub import hf_hub_url

        if not f.sha256:
            raise PullError(f"{f.path} in hf.co/{self.repo_id} has no LFS sha256 to verify against")
        digest = parse_digest("sha256:" + f.sha256)
        _check_cancel(self.cancel)
        status = f"pulling {digest[7:19]}"

        def report(done: int) -> None:
            self.progress({"status": status, "digest": digest, "total": f.size, "completed": done})

        url = hf_hub_url(self.repo_id, f.path, revision=hub.REVISION, endpoint=hub.endpoint())
        self.hold.add(digest)  # before looking: a blob found here stays until the commit
        download.fetch(
            self.store.blobs,
            digest,
            f.size,
            url,
            self.headers,
            report,
            self.cancel,
            limit=self.limit,
            notice=lambda line: self.progress({"status": line}),
        )
        return digest


def _commit(store: Store, name: ModelName, manifest: Manifest, progress: ProgressFn) -> Entry:
    progress({"status": "writing manifest"})
    with store.lock:  # the entry as committed, even if a delete comes right after
        store.commit(name, manifest)
        entry = store.get(name)
    progress({"status": "success"})
    return entry


class OriginFile(TypedDict):
    """One pulled file: its path in the repo, its digest (the Hub's LFS sha256) and size."""

    file: str
    digest: str
    size: int


class HubOrigin(TypedDict):
    """Where a pulled model came from (the config blob's ``origin``, which ``show`` lists)."""

    source: str  # hf.co/{repo}:{quant}: pulls the same files again
    digest: str
    files: list[OriginFile]
    catalog: NotRequired[str]  # the catalogue entry that led here
    projector: NotRequired[OriginFile]


def _origin(
    repo_id: str,
    choice: hub.Choice,
    mmproj: hub.HubFile | None,
    layers: list[Layer],
    via: str | None,
) -> HubOrigin:
    """Where the model came from, as ``show`` reports it: a name that pulls the same files
    again (``hf.co/{repo}:{quant}``), the catalogue entry if one led here, and each file
    with its digest (the Hub's LFS sha256, which is also the blob's name)."""

    def item(f: hub.HubFile) -> OriginFile:
        return {"file": f.path, "digest": f"sha256:{f.sha256}", "size": f.size}

    out: HubOrigin = {
        "source": f"hf.co/{repo_id}:{choice.label}",
        "digest": f"sha256:{choice.files[0].sha256}",
        "files": [item(f) for f in choice.files],
    }
    if via:
        out["catalog"] = via
    if mmproj is not None and any(x.media_type == Media.PROJECTOR for x in layers):
        out["projector"] = item(mmproj)
    return out


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise download.cancelled()


def _model_info(store: Store, layers: list[Layer]) -> ModelInfo:
    """Read the downloaded GGUF(s); a malformed file is dropped unless another model uses it."""
    paths = [store.blobs.path(layer.digest) for layer in layers]
    try:
        return read_model_info_split(paths)  # one file or the shards of a split model
    except InvalidModelFile as exc:
        with store.lock:
            in_use = store.manifests.referenced()
            for layer in layers:
                if layer.digest not in in_use:
                    store.blobs.remove(layer.digest)
        raise InvalidModelFile(f"the pulled file is not a usable GGUF: {exc}") from None


def _check_projector(
    store: Store, layers: list[Layer], progress: ProgressFn, *, explicit: bool
) -> list[Layer]:
    """Keep the projector layer only if it is a clip GGUF libmtmd can load.

    An automatic choice that is not one is left out (the model still works for
    text) and said so; an explicitly requested one fails the pull.
    """
    layer = next((x for x in layers if x.media_type == Media.PROJECTOR), None)
    if layer is None:
        return layers
    try:
        proj.projector_header(store.blobs.path(layer.digest), layer.name)
    except InvalidModelFile as exc:
        with store.lock:
            if layer.digest not in store.manifests.referenced():
                store.blobs.remove(layer.digest)
        if explicit:
            raise InvalidModelFile(f"the requested projector is not usable: {exc}") from None
        progress({"status": f"skipping projector {layer.name}: {exc}"})
        return [x for x in layers if x is not layer]
    return layers


def _stop_tokens(info: ModelInfo) -> list[str]:
    stops: list[str] = []
    for tok in (info.eos_token, info.eot_token):
        # Only special-looking tokens: a plain word as a stop string would cut replies.
        if tok and tok not in stops and tok.startswith("<") and tok.endswith(">"):
            stops.append(tok)
    return stops


def _extra_layers(
    store: Store,
    repo_id: str,
    choice: hub.Choice,
    headers: dict[str, str],
    info: ModelInfo,
    hold: Hold,
) -> list[Layer]:
    """Template / system / params layers: the repo's own files, else stop tokens from the GGUF.

    The GGUF's ``tokenizer.chat_template`` stays inside the GGUF: a template
    layer is only written when the repo ships a ``template`` file (Go syntax).
    """
    out: list[Layer] = []
    params: JSONObject | None = None
    for fname, media in (
        ("template", Media.TEMPLATE),
        ("system", Media.SYSTEM),
        ("params", Media.PARAMS),
    ):
        f = choice.extras.get(fname)
        if f is None or f.size > MAX_EXTRA_BYTES:
            continue
        data = _small_file(repo_id, fname, headers)
        if data is None:
            continue
        if media == Media.PARAMS:
            try:
                value = json.loads(data)
            except ValueError:
                continue
            if isinstance(value, dict):
                params = value
            continue
        out.append(store.put_bytes(media, data, hold=hold))
    if params is None:
        stops = _stop_tokens(info)
        params = {"stop": stops} if stops else None
    if params:
        out.append(store.put_json(Media.PARAMS, params, hold=hold))
    return out


def _small_file(repo_id: str, fname: str, headers: dict[str, str]) -> bytes | None:
    import httpx
    from huggingface_hub import hf_hub_url

    url = hf_hub_url(repo_id, fname, revision=hub.REVISION, endpoint=hub.endpoint())
    try:
        with (
            httpx.Client(
                follow_redirects=True, timeout=download.TIMEOUT, verify=tls.context()
            ) as client,
            client.stream("GET", url, headers=headers) as r,
        ):
            if r.status_code != 200:
                return None
            data = b""
            for chunk in r.iter_bytes():
                data += chunk
                if len(data) > MAX_EXTRA_BYTES:
                    return None
            return data
    except httpx.HTTPError:
        return None  # optional extras never fail a pull
