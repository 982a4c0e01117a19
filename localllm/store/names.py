"""Model names and digests: parsing, validation and their place on disk.

A name is ``[host/][namespace/]model[:tag]``; ``hf.co/{user}/{repo}[:{quant}]``
(also written ``huggingface.co/...`` or ``https://huggingface.co/...``) names a
Hugging Face GGUF repository.  Every part is checked against a strict pattern
before it becomes a path component, so no name can reach outside the store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from localllm.errors import InvalidDigest, InvalidName

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
HF_HOST = "hf.co"
_HF_ALIASES = ("huggingface.co", "www.huggingface.co", "hf.co")

_HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}$")
_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,79}$")
# Hugging Face user names may contain dots as well.
_HF_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}$")
_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
MAX_NAME_LENGTH = 600


@dataclass(frozen=True)
class ModelName:
    """A validated, fully qualified model name."""

    host: str
    namespace: str
    model: str
    tag: str

    @property
    def is_hf(self) -> bool:
        return self.host.lower() == HF_HOST

    @property
    def display(self) -> str:
        """The shortest form people type: ``llama3:latest``, ``ns/m:t``, ``hf.co/u/r:Q4_K_M``."""
        if self.host == DEFAULT_HOST:
            if self.namespace == DEFAULT_NAMESPACE:
                return f"{self.model}:{self.tag}"
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    @property
    def parts(self) -> tuple[str, str, str, str]:
        """Path components of the manifest below ``manifests/``."""
        return (self.host, self.namespace, self.model, self.tag)

    def key(self) -> tuple[str, ...]:
        """Names compare case-insensitively, part by part."""
        return tuple(p.lower() for p in self.parts)

    def with_tag(self, tag: str) -> ModelName:
        return parse_name(f"{self.host}/{self.namespace}/{self.model}:{tag}")

    def __str__(self) -> str:
        return self.display


def parse_name(raw: object) -> ModelName:
    """Parse and validate a model name, filling in the default host, namespace and tag."""
    if not isinstance(raw, str):
        raise InvalidName("model name must be a string")
    text = raw.strip()
    if not text:
        raise InvalidName("model is required")
    if len(text) > MAX_NAME_LENGTH:
        raise InvalidName(f'name "{text[:40]}…" is invalid: too long')
    for scheme in ("https://", "http://"):
        if text.lower().startswith(scheme):
            text = text[len(scheme) :]
    if "@" in text:
        # name@sha256:... pins are not supported: refuse rather than misread.
        raise InvalidName(f'name "{raw}" is invalid: digests in names are not supported')

    tag = DEFAULT_TAG
    last_slash = text.rfind("/")
    last_colon = text.rfind(":")
    if last_colon > last_slash:
        text, tag = text[:last_colon], text[last_colon + 1 :]
    segments = text.split("/")
    if any(seg == "" for seg in segments):
        raise InvalidName(f'name "{raw}" is invalid')

    if len(segments) == 1:
        host, namespace, model = DEFAULT_HOST, DEFAULT_NAMESPACE, segments[0]
    elif len(segments) == 2:
        host, (namespace, model) = DEFAULT_HOST, segments
    elif len(segments) == 3:
        host, namespace, model = segments
    else:
        raise InvalidName(f'name "{raw}" is invalid: too many parts')

    if host.lower() in _HF_ALIASES:
        host = HF_HOST
    ns_re = _HF_NAMESPACE_RE if host == HF_HOST else _NAMESPACE_RE
    model_re = _HF_NAMESPACE_RE if host == HF_HOST else _PART_RE
    if tag == "":
        tag = DEFAULT_TAG
    if not (
        _HOST_RE.fullmatch(host)
        and ns_re.fullmatch(namespace)
        and model_re.fullmatch(model)
        and _TAG_RE.fullmatch(tag)
    ):
        raise InvalidName(f'name "{raw}" is invalid')
    for part in (host, namespace, model, tag):
        # Belt and braces: patterns already exclude these, but a path part must never be one.
        if part in (".", "..") or "/" in part or "\\" in part or "\x00" in part:
            raise InvalidName(f'name "{raw}" is invalid')
    return ModelName(host, namespace, model, tag)


def parse_digest(raw: object) -> str:
    """Validate ``sha256:<hex>`` / ``sha256-<hex>`` and return the canonical ``sha256:<hex>``."""
    if not isinstance(raw, str):
        raise InvalidDigest("digest must be a string")
    match = _DIGEST_RE.fullmatch(raw.strip())
    if not match:
        raise InvalidDigest(f'invalid digest "{raw[:80]}": expected sha256:<64 hex>')
    return f"sha256:{match.group(1)}"


def digest_filename(digest: str) -> str:
    """The blob's file name: ``sha256-<hex>``."""
    return parse_digest(digest).replace(":", "-")
