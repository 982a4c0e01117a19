"""One catalogue file: its format, its types, and reading it (``parse``), bounded.

``catalog.toml`` beside this module is the file that ships (the comment at its top
documents the format).  This module only turns bytes into families and checks them;
which files are in effect, and in what order, is ``store/catalog.py``'s business, and
whether a downloaded file may be trusted is ``store/catalog_trust.py``'s.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localllm.errors import InvalidRequest
from localllm.store.names import DEFAULT_HOST, DEFAULT_NAMESPACE, ModelName, parse_name

FORMAT = 1  # the catalogue format this code reads
MAX_BYTES = 1 << 20  # any catalogue file; the built-in one is ~15 KiB
_PROJECTOR_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_TAG_RE = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,79}$")
_DOC_KEYS = frozenset({"format", "updated", "models"})
_FAMILY_KEYS = frozenset({"description", "latest", "tags"})
_TAG_KEYS = frozenset({"source", "projector", "verified"})


class CatalogError(InvalidRequest):
    """A catalogue file that cannot be used: its path and the first problem."""


@dataclass(frozen=True)
class Tag:
    source: ModelName  # hf.co/{user}/{repo}:{quant or file}
    projector: str | None = None  # a projector file or precision; "none" for none
    layer: str = "built-in"  # the file this tag came from: built-in, updated or user
    # False: the repo or its quant could not be checked against a public listing when
    # the entry was written (``localllm catalog`` marks it; the pull works as for any)
    verified: bool = True


@dataclass(frozen=True)
class Family:
    name: str  # as people type it: "llama3.2", or "namespace/model"
    description: str = ""
    latest: str | None = None
    tags: dict[str, Tag] = field(default_factory=dict)  # lower-case tag -> entry


# -- reading -------------------------------------------------------------------------------
def parse(
    data: bytes, where: str, layer: str = "built-in"
) -> tuple[dict[str, Family], dt.date | None]:
    """The families and the ``updated`` date of one catalogue file; ``CatalogError`` else."""
    if len(data) > MAX_BYTES:
        raise CatalogError(f"{where}: larger than {MAX_BYTES >> 10} KiB")
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{where}: not a TOML file: {exc}") from None
    fmt = doc.get("format", FORMAT)
    if fmt != FORMAT:
        raise CatalogError(f"{where}: catalogue format {fmt!r}; this localllm reads {FORMAT}")
    updated = doc.get("updated")
    if updated is not None and not isinstance(updated, dt.date):
        raise CatalogError(f"{where}: 'updated' must be a date (2025-08-01)")
    _known_keys(doc, _DOC_KEYS, where)
    models = doc.get("models", {})
    if not isinstance(models, dict):
        raise CatalogError(f"{where}: [models] must be a table")
    families: dict[str, Family] = {}
    for key, value in models.items():
        fam = _family(key, value, f"{where}: models.{key}", layer)
        fkey = _family_key(fam.name)
        if fkey in families:
            raise CatalogError(f"{where}: models.{key} is listed twice")
        families[fkey] = fam
    return families, updated if isinstance(updated, dt.date) else None


def _known_keys(table: Mapping[str, object], allowed: frozenset[str], where: str) -> None:
    """A table of the file holds only ``allowed`` keys; the first other one is the error."""
    extra = set(table) - allowed
    if extra:
        raise CatalogError(f"{where}: unknown key {sorted(extra)[0]!r}")


def _family_key(name: str) -> str:
    parsed = parse_name(name)
    return f"{parsed.namespace}/{parsed.model}".lower()


def _family(key: str, value: Any, where: str, layer: str) -> Family:
    try:
        name = parse_name(key)
    except InvalidRequest:
        raise CatalogError(f"{where}: not a model name") from None
    if ":" in key or name.host != DEFAULT_HOST or name.is_hf:
        raise CatalogError(
            f"{where}: a family is a plain name (llama3.2 or namespace/model), without host or tag"
        )
    if not isinstance(value, dict):
        raise CatalogError(f"{where}: must be a table")
    _known_keys(value, _FAMILY_KEYS, where)
    description = value.get("description", "")
    if not isinstance(description, str) or len(description) > 500:
        raise CatalogError(f"{where}.description: must be a string of at most 500 characters")
    raw_tags = value.get("tags", {})
    if not isinstance(raw_tags, dict):
        raise CatalogError(f"{where}.tags: must be a table")
    tags: dict[str, Tag] = {}
    for tag, spec in raw_tags.items():
        low = tag.lower()
        if not _TAG_RE.fullmatch(low) or low == "latest":
            raise CatalogError(
                f"{where}.tags.{tag}: not a usable tag"
                + (' (set latest = "<tag>" instead)' if low == "latest" else "")
            )
        if low in tags:
            raise CatalogError(f"{where}.tags.{tag}: listed twice")
        tags[low] = _tag(spec, f"{where}.tags.{tag}", layer)
    latest = value.get("latest")
    if latest is not None:
        # A user file may point latest at a tag of the family it extends: checked after merge.
        if not isinstance(latest, str) or (latest.lower() not in tags and layer != "user"):
            raise CatalogError(f"{where}.latest: must name one of its tags")
        latest = latest.lower()
    display = key if name.namespace != DEFAULT_NAMESPACE or "/" in key else name.model
    return Family(display, description, latest, tags)


def _tag(spec: Any, where: str, layer: str) -> Tag:
    if isinstance(spec, str):
        spec = {"source": spec}
    if not isinstance(spec, dict):
        raise CatalogError(f"{where}: must be a source string or a table")
    _known_keys(spec, _TAG_KEYS, where)
    raw = spec.get("source")
    try:
        source = parse_name(raw)
    except InvalidRequest:
        raise CatalogError(f"{where}.source: not a model name: {str(raw)[:80]!r}") from None
    if not source.is_hf or ":" not in str(raw).rsplit("/", 1)[-1]:
        raise CatalogError(f"{where}.source: must be hf.co/{{user}}/{{repo}}:{{quant or file}}")
    projector = spec.get("projector")
    if projector is not None and (
        not isinstance(projector, str) or not _PROJECTOR_RE.fullmatch(projector)
    ):
        raise CatalogError(f'{where}.projector: must be a file name, a precision or "none"')
    verified = spec.get("verified", True)
    if not isinstance(verified, bool):
        raise CatalogError(f"{where}.verified: must be true or false")
    return Tag(source, projector, layer, verified)


def merge(base: dict[str, Family], over: dict[str, Family]) -> dict[str, Family]:
    """``over``'s families added to ``base``; a family in both gets ``over``'s tags
    (tag by tag), description and ``latest`` where it sets them."""
    out = dict(base)
    for key, fam in over.items():
        old = out.get(key)
        if old is None:
            out[key] = fam
            continue
        tags = {**old.tags, **fam.tags}
        out[key] = Family(
            old.name, fam.description or old.description, fam.latest or old.latest, tags
        )
    return out


def builtin_bytes() -> bytes:
    from importlib.resources import files

    return files("localllm.store").joinpath("catalog.toml").read_bytes()


def read(path: Path) -> bytes:
    """A catalogue file's bytes, at most one more than ``MAX_BYTES``."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)  # bounded: a huge file is refused by parse()
    return data
