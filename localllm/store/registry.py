"""Ollama's registry as a source of models: names, manifests and where blobs are.

The registry is ``LOCALLLM_OLLAMA_REGISTRY`` (default ``https://registry.ollama.ai``;
``off``: never asked) and speaks the Docker Registry v2 paths Ollama's own pull uses:
``GET {registry}/v2/{namespace}/{model}/manifests/{tag}`` with ``Accept:
application/vnd.docker.distribution.manifest.v2+json``, and ``GET
{registry}/v2/{namespace}/{model}/blobs/{digest}``, which may redirect to a CDN and
answers ``Range``.  Library names (``qwen3.5``) are the namespace ``library``;
community names are ``user/model``.  ``ollama://NAME`` asks the registry even for a
name the catalogue has (``split_scheme``).

``fetch_manifest`` reads a manifest bounded (``MAX_MANIFEST_BYTES``, uncompressed),
through the store's strict reader (every digest and size checked), and maps its
layers to ours as an import from Ollama's own store does (``ollama_store.MEDIA_TYPES``).
A model this engine cannot run is refused here, before anything is downloaded: one
stored as safetensors tensors (Ollama's MLX engine), a cloud model (no weights), or a
layer of a kind we do not know.  ``store/registry_pull.py`` downloads what it names.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import httpx

from localllm import __version__, config, tls
from localllm.errors import (
    DigestMismatch,
    InvalidRequest,
    LocalLLMError,
    ModelNotFound,
    PullError,
)
from localllm.store.blobs import MAX_TEXT_LAYER
from localllm.store.manifests import (
    CONFIG_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    MAX_MANIFEST_BYTES,
    Layer,
    Manifest,
    Media,
)
from localllm.store.names import DEFAULT_HOST, ModelName
from localllm.store.ollama_store import (
    DROPPED,
    MEDIA_TYPES,
    SINGLE_TYPES,
    TENSOR_TYPES,
    TEXT_TYPES,
    printable,
)

SCHEME = "ollama://"
TIMEOUT = httpx.Timeout(30.0, connect=10.0)
MAX_LAYERS = 64
MAX_CONFIG_BYTES = 1 << 20


class NotInRegistry(ModelNotFound):
    """The registry has no model of that name and tag for us (404, or 401/403)."""


class RegistryUnreachable(PullError):
    """The registry could not be asked (network, DNS, TLS): 502."""

    status = 502


def split_scheme(raw: str) -> tuple[str, bool]:
    """``ollama://NAME`` → (``NAME``, True); any other text → (itself, False)."""
    if raw.strip().lower().startswith(SCHEME):
        return raw.strip()[len(SCHEME) :], True
    return raw, False


def base_url() -> str:
    """The registry's base URL, or ``""`` when ``LOCALLLM_OLLAMA_REGISTRY`` is off."""
    return config.OLLAMA_REGISTRY.get()


def request_headers() -> dict[str, str]:
    return {"User-Agent": f"localllm/{__version__}", "Accept-Encoding": "identity"}


@dataclass(frozen=True)
class Remote:
    """A model's manifest as the registry serves it, its layers mapped to ours."""

    name: ModelName
    base: str  # the registry's base URL
    digest: str  # sha256 of the manifest's bytes as served
    manifest: Manifest
    notes: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        """The name that pulls this model from the registry again."""
        return SCHEME + self.name.display

    def blob_url(self, digest: str) -> str:
        return f"{self.base}/v2/{self.name.namespace}/{self.name.model}/blobs/{digest}"

    @property
    def model(self) -> Layer:
        layer = self.manifest.first(Media.MODEL)
        assert layer is not None  # fetch_manifest refuses manifests without one
        return layer


def fetch_manifest(name: ModelName, base: str, client: httpx.Client | None = None) -> Remote:
    """The manifest of ``name`` at the registry ``base`` (see the module docstring)."""
    if name.host.lower() != DEFAULT_HOST:
        raise InvalidRequest(f"'{name.display}' is not a name of Ollama's registry")
    url = f"{base}/v2/{name.namespace}/{name.model}/manifests/{name.tag}"
    headers = {**request_headers(), "Accept": MANIFEST_MEDIA_TYPE}
    own = client is None
    http = client or httpx.Client(follow_redirects=True, timeout=TIMEOUT, verify=tls.context())
    try:
        with http.stream("GET", url, headers=headers) as r:
            data = _body(r, name, base)
    except httpx.HTTPError as exc:
        raise RegistryUnreachable(
            f"Ollama's registry at {base} could not be reached: {str(exc) or type(exc).__name__}"
        ) from None
    finally:
        if own:
            http.close()
    manifest, notes = _mapped(data, name)
    return Remote(name, base, "sha256:" + hashlib.sha256(data).hexdigest(), manifest, notes)


def _body(r: httpx.Response, name: ModelName, base: str) -> bytes:
    who = f"Ollama's registry ({base})"
    if r.status_code == 404:
        raise NotInRegistry(f"{name.display} is not in {who}")
    if r.status_code in (401, 403):  # registries answer so for names they do not have, too
        raise NotInRegistry(f"{who} refused {name.display} ({r.status_code}): private, or none")
    if r.status_code != 200:
        raise PullError(f"{who} answered {r.status_code} for {name.display}", status=502)
    encoding = r.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise PullError(f"{who} sent the manifest compressed ({encoding[:40]})", status=502)
    body = bytearray()
    for chunk in r.iter_raw():
        body += chunk
        if len(body) > MAX_MANIFEST_BYTES:
            limit = MAX_MANIFEST_BYTES >> 20
            raise PullError(f"{who} sent a manifest over {limit} MiB", status=502)
    return bytes(body)


def _mapped(data: bytes, name: ModelName) -> tuple[Manifest, list[str]]:
    """The manifest with our media types, and notes on what was left out."""
    what = f"the registry's manifest of {name.display}"
    try:
        doc = json.loads(data)
        manifest = Manifest.from_bytes(data)
    except (ValueError, UnicodeDecodeError, LocalLLMError) as exc:
        raise PullError(f"{what} is malformed: {exc}", status=502) from None
    if manifest.config.media_type != CONFIG_MEDIA_TYPE or manifest.config.size > MAX_CONFIG_BYTES:
        raise PullError(f"{what} has an unusable config layer", status=502)
    if len(manifest.layers) > MAX_LAYERS:
        raise PullError(f"{what} has {len(manifest.layers)} layers", status=502)
    notes: list[str] = []
    layers: list[Layer] = []
    for layer in manifest.layers:
        media = layer.media_type
        if media in TENSOR_TYPES:
            raise InvalidRequest(
                f"{SCHEME}{name.display} is stored as safetensors tensors for Ollama's own "
                "engine (MLX), not as a GGUF: localllm cannot run it"
            )
        if media in DROPPED:
            notes.append(f"left out its obsolete {media.rsplit('.', 1)[-1]} layer")
            continue
        ours = MEDIA_TYPES.get(media)
        if ours is None:
            raise InvalidRequest(
                f"{SCHEME}{name.display} has a layer localllm does not know "
                f"({printable(media)}): not pulled"
            )
        if ours in TEXT_TYPES and layer.size > MAX_TEXT_LAYER:
            raise PullError(f"{what}: its {media} layer is {layer.size} bytes", status=502)
        if ours in SINGLE_TYPES:  # as Ollama reads a model: the last one of a kind wins
            layers = [x for x in layers if x.media_type != ours]
        layers.append(Layer(ours, layer.digest, layer.size, layer.name))
    models = [x for x in layers if x.media_type == Media.MODEL]
    if not models:
        remote = isinstance(doc, dict) and not doc.get("layers")
        raise InvalidRequest(
            f"{SCHEME}{name.display} has no GGUF weights"
            + (" (a cloud model: it runs on Ollama's servers)" if remote else "")
        )
    if len(models) > 1:
        raise InvalidRequest(
            f"{SCHEME}{name.display} has {len(models)} model layers; localllm pulls one"
        )
    return Manifest(manifest.config, layers), notes


def read_small(remote: Remote, layer: Layer, limit: int, client: httpx.Client) -> bytes:
    """A small blob (the config) read into memory and checked against its digest."""
    if layer.size > limit:
        raise PullError(f"{layer.digest} is {layer.size} bytes, over {limit}", status=502)
    try:
        with client.stream("GET", remote.blob_url(layer.digest), headers=request_headers()) as r:
            if r.status_code != 200:
                raise PullError(
                    f"Ollama's registry answered {r.status_code} for blob {layer.digest}",
                    status=502,
                )
            data = bytearray()
            for chunk in r.iter_raw():
                data += chunk
                if len(data) > layer.size:
                    break
    except httpx.HTTPError as exc:
        raise RegistryUnreachable(f"reading blob {layer.digest}: {exc}") from None
    got = "sha256:" + hashlib.sha256(data).hexdigest()
    if len(data) != layer.size or got != layer.digest:
        raise DigestMismatch(f'digest mismatch, expected "{layer.digest}", got "{got}"')
    return bytes(data)
