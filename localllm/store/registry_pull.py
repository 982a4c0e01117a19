"""Pull a model from Ollama's registry into the store: check its header, fetch every layer, commit.

The registry's twin of ``store/pull.py`` (same progress lines, same store, same
verifying downloader), for a manifest ``store/registry.py`` has read:

1. The model blob's GGUF header is read with range requests (``remote.RangeFile``,
   the bounded header reader) before anything is downloaded.  Tensors our reader
   refuses, or an architecture the pinned llama.cpp does not know (``gguf/archs.py``:
   models built for Ollama's own engine), stop the pull in one line that names the
   catalogue's entry of that family when there is one.  A header that cannot be read
   is said and the pull goes on (the file is checked again once here).  Then
   ``preflight(source, info, header_bytes)`` runs (``info`` None: the header was not
   read): the caller's fit check, or a dry run that stops the pull there.
2. Every layer (model first, then projector, adapter, template, params, system,
   license, messages) is downloaded by ``download.fetch``: redirects followed,
   resumed with ``Range``, hashed as it arrives, and named only if the sha256 matches.
3. The downloaded GGUF is read whole by our reader and its architecture checked again.
4. The config blob is the registry's (read into memory, its digest checked) with our
   fields where it lacks them and an ``origin``: the ``ollama://`` name that pulls it
   again, the registry and the manifest's digest.  A later ``pull`` of the name follows
   that origin (``models/ollama.py``).  The manifest is written last.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias, TypedDict

import httpx

from localllm import tls
from localllm.api.wire import JSONObject
from localllm.errors import InvalidModelFile, LocalLLMError
from localllm.gguf import archs
from localllm.gguf.info import ModelInfo, model_info_from_headers, read_model_info
from localllm.gguf.reader import read_header_from
from localllm.store import download, ratelimit, remote as ranges
from localllm.store.importer import config_for
from localllm.store.local import Hold, Store
from localllm.store.manifests import Entry, Layer, Manifest
from localllm.store.names import ModelName
from localllm.store.registry import MAX_CONFIG_BYTES, Remote, read_small, request_headers

if TYPE_CHECKING:
    from localllm.api.wire import Progress

ProgressFn: TypeAlias = "Callable[[Progress], None]"
Preflight = Callable[[str, ModelInfo | None, int], None]


def pull_from_registry(
    store: Store,
    name: ModelName,
    remote: Remote,
    progress: ProgressFn,
    *,
    cancel: threading.Event | None = None,
    why: str = "",
    preflight: Preflight | None = None,
    max_rate: int | None = None,
) -> Entry:
    """Pull ``remote`` into ``store`` as ``name`` and return its entry (see the module doc).
    ``why``: how the name came to the registry, shown in the progress; ``max_rate``: this
    pull's bandwidth cap in bytes/s, shared by its layers (store/ratelimit.py)."""
    progress({"status": "pulling manifest"})
    progress({"status": f"{name.display} is {remote.source}" + (f" ({why})" if why else "")})
    for note in remote.notes:
        progress({"status": note})
    model = remote.model
    with httpx.Client(
        follow_redirects=True, timeout=ranges.TIMEOUT, verify=tls.context()
    ) as client:
        info, spent = read_info(remote, client, progress)
        if preflight is not None:
            preflight(remote.source, info, spent)
        registry_config = read_small(remote, remote.manifest.config, MAX_CONFIG_BYTES, client)
    limit = ratelimit.for_pull(max_rate)
    hold = store.hold()
    try:
        for layer in [model, *(x for x in remote.manifest.layers if x is not model)]:
            _fetch(store, remote, layer, progress, cancel, hold, limit)
        progress({"status": "verifying sha256 digest"})
        info = _local_info(store, remote)
        value = {**config_for(info), **_config(registry_config), "origin": origin(remote)}
        config = store.put_config(value, hold=hold)
        if cancel is not None and cancel.is_set():
            raise download.cancelled()
        progress({"status": "writing manifest"})
        with store.lock:  # the entry as committed, even if a delete comes right after
            store.commit(name, Manifest(config, remote.manifest.layers))
            entry = store.get(name)
        progress({"status": "success"})
        return entry
    finally:
        hold.release()


class RegistryOrigin(TypedDict):
    """Where a model pulled from a registry came from: its name there, the registry, the
    manifest's digest and the model blob's."""

    source: str
    registry: str
    manifest: str
    digest: str


def origin(remote: Remote) -> RegistryOrigin:
    """Where the model came from, as ``show`` reports it and a later pull follows it."""
    return {
        "source": remote.source,
        "registry": remote.base,
        "manifest": remote.digest,
        "digest": remote.model.digest,
    }


def read_info(
    remote: Remote, client: httpx.Client, progress: ProgressFn
) -> tuple[ModelInfo | None, int]:
    """The model blob's header over range requests, its architecture checked, and the
    bytes that cost; None (and a progress line) when the registry would not answer the
    ranges."""
    progress({"status": "reading the model's header (range requests, before downloading it)"})
    try:
        return header_info(remote, client)
    except (ranges.RemoteReadError, httpx.HTTPError) as exc:
        progress({"status": f"could not read the header before downloading: {exc}"})
        return None, 0


def header_info(remote: Remote, client: httpx.Client) -> tuple[ModelInfo, int]:
    """The model blob's ``ModelInfo`` from its header (range requests), its architecture
    checked, and the bytes that cost."""
    layer = remote.model
    rf = ranges.RangeFile(
        client, remote.blob_url(layer.digest), layer.size, remote.source, request_headers()
    )
    try:
        header = read_header_from(rf, layer.size, remote.source)  # type: ignore[arg-type]
        info = model_info_from_headers([header])
    except InvalidModelFile as exc:
        raise InvalidModelFile(f"not pulling {remote.source}: {exc}") from None
    check_architecture(info.architecture, remote)
    return info, rf.fetched


def check_architecture(arch: str, remote: Remote) -> None:
    """One line, naming the architecture and the catalogue's entry of the family if any,
    when the pinned llama.cpp cannot load ``arch``."""
    if archs.known(arch):
        return
    text = (
        f"{remote.source} is a '{arch}' model, an architecture the pinned llama.cpp "
        "cannot load (it is built for Ollama's own engine)"
    )
    alternative = catalogue_alternative(arch, remote.name)
    if alternative:
        text += f"; pull the catalogue's instead: localllm pull {alternative}"
    raise InvalidModelFile(text)


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def catalogue_alternative(arch: str, name: ModelName) -> str | None:
    """The catalogue name of ``name``'s family, or of ``arch``'s (``qwen35`` is ``qwen3.5``)."""
    from localllm.store import catalog

    try:
        cat = catalog.load()
    except LocalLLMError:
        return None
    wanted = (_squash(name.model), _squash(arch))
    for want in wanted:
        for fam in cat.families.values():
            if _squash(fam.name.rsplit("/", 1)[-1]) == want:
                tag = name.tag.lower()
                return f"{fam.name}:{tag}" if tag in fam.tags else fam.name
    return None


def _fetch(
    store: Store,
    remote: Remote,
    layer: Layer,
    progress: ProgressFn,
    cancel: threading.Event | None,
    hold: Hold,
    limit: ratelimit.Bucket | None,
) -> None:
    if cancel is not None and cancel.is_set():
        raise download.cancelled()
    status = f"pulling {layer.digest[7:19]}"

    def report(done: int) -> None:
        progress({"status": status, "digest": layer.digest, "total": layer.size, "completed": done})

    hold.add(layer.digest)  # before looking: a blob found here stays until the commit
    url = remote.blob_url(layer.digest)
    download.fetch(
        store.blobs,
        layer.digest,
        layer.size,
        url,
        request_headers(),
        report,
        cancel,
        limit=limit,
        notice=lambda line: progress({"status": line}),
    )


def _local_info(store: Store, remote: Remote) -> ModelInfo:
    """The downloaded GGUF read whole; a malformed or unloadable one is removed unless
    another model uses it."""
    digest = remote.model.digest
    try:
        info = read_model_info(store.blobs.path(digest))
    except InvalidModelFile as exc:
        _drop(store, digest)
        raise InvalidModelFile(f"not pulling {remote.source}: {exc}") from None
    try:
        check_architecture(info.architecture, remote)
    except InvalidModelFile:
        _drop(store, digest)
        raise
    return info


def _drop(store: Store, digest: str) -> None:
    with store.lock:
        if digest not in store.manifests.referenced():
            store.blobs.remove(digest)


def _config(data: bytes) -> JSONObject:
    """The registry's config blob as JSON (Ollama's fields: family, size, renderer...)."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k != "origin"}
