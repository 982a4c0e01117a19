"""The library-name catalogue: ``llama3.2``, ``qwen3:8b``, ``bge-m3`` → a Hugging Face GGUF.

A catalogue is a TOML file (``catalog.toml`` beside this module is the one that
ships; see the comment at its top for the format).  Each *family*
(``llama3.2``) has tags (``1b``, ``3b``), each pointing at an
``hf.co/{user}/{repo}:{quant or file}`` name and, where the repo's automatic
choice would not do, a vision projector; ``latest`` names one of the tags, as
Ollama's ``:latest`` does.  Ollama's long tags resolve too:
``llama3.2:3b-instruct-q8_0`` is the ``3b`` entry with the quant ``Q8_0``.

Three files, later ones winning tag by tag:

1. the built-in catalogue (package data);
2. the copy ``localllm catalog update`` downloaded (``paths.catalog_data()``),
   used instead of the built-in one when its ``updated`` date is later, so an
   upgrade of localllm is not hidden by an older download;
3. the user's own file (``paths.user_catalog()``), which adds or overrides entries.

The catalogue is only asked when a name is *pulled*: a name already in the
store (a model created or copied locally) always means that model.
"""

from __future__ import annotations

import datetime as dt
import difflib
import logging
import re
import threading
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localllm import paths
from localllm.errors import InvalidRequest, ModelNotFound
from localllm.store.names import DEFAULT_HOST, DEFAULT_NAMESPACE, ModelName, parse_name

log = logging.getLogger(__name__)

FORMAT = 1  # the catalogue format this code reads
MAX_BYTES = 1 << 20  # any catalogue file; the built-in one is ~15 KiB
_PROJECTOR_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_TAG_RE = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,79}$")
# The quant at the end of Ollama's long tags: q4_K_M, q8_0, iq3_m, fp16, bf16, mxfp4.
_QUANT_RE = re.compile(r"^(i?q\d(?:_[a-z0-9]+)*|fp16|f16|bf16|f32|mxfp4)$")
# Words Ollama puts between the size and the quant of an instruct model's tag.  ("text"
# is the base model, which the catalogue does not point at, so it is not one of them.)
_VARIANT_WORDS = frozenset({"instruct", "it", "chat"})
_FAMILY_KEYS = frozenset({"description", "latest", "tags"})
_TAG_KEYS = frozenset({"source", "projector"})


class CatalogError(InvalidRequest):
    """A catalogue file that cannot be used: its path and the first problem."""


@dataclass(frozen=True)
class Tag:
    source: ModelName  # hf.co/{user}/{repo}:{quant or file}
    projector: str | None = None  # a projector file or precision; "none" for none
    layer: str = "built-in"  # the file this tag came from: built-in, updated or user


@dataclass(frozen=True)
class Family:
    name: str  # as people type it: "llama3.2", or "namespace/model"
    description: str = ""
    latest: str | None = None
    tags: dict[str, Tag] = field(default_factory=dict)  # lower-case tag -> entry


@dataclass(frozen=True)
class Resolved:
    """What a catalogue name pulls."""

    name: str  # "llama3.2:3b": the family and the tag it resolved to
    source: ModelName
    projector: str | None


@dataclass(frozen=True)
class Catalog:
    families: dict[str, Family]  # key: "namespace/model", lower case
    updated: dt.date | None
    base: str  # "built-in" or "updated": which of the two the entries start from
    user_file: Path | None  # the user's file, when it exists and was read

    def family(self, name: ModelName) -> Family | None:
        if name.host.lower() != DEFAULT_HOST:
            return None
        return self.families.get(f"{name.namespace}/{name.model}".lower())

    def resolve(self, name: ModelName) -> Resolved | None:
        """The entry ``name`` names; None when its family is not in the catalogue.

        A family that is, with a tag it lacks, is ``ModelNotFound`` listing its tags.
        """
        family = self.family(name)
        if family is None:
            return None
        tag = name.tag.lower()
        if tag == "latest":
            if family.latest is None:
                raise ModelNotFound(
                    f"{family.name} has no latest tag in the catalogue; pick one: "
                    + ", ".join(f"{family.name}:{t}" for t in family.tags)
                )
            tag = family.latest
        entry = family.tags.get(tag)
        if entry is not None:
            return Resolved(f"{family.name}:{tag}", entry.source, entry.projector)
        long = self._long_tag(family, tag)
        if long is not None:
            return long
        raise ModelNotFound(
            f"{family.name} has no tag '{name.tag}' in the catalogue; tags: "
            + ", ".join(["latest", *family.tags])
        )

    @staticmethod
    def _long_tag(family: Family, tag: str) -> Resolved | None:
        """``3b-instruct-q8_0`` → the ``3b`` entry with the quant ``Q8_0`` (Ollama's tags)."""
        pieces = tag.split("-")
        if len(pieces) < 2 or not _QUANT_RE.fullmatch(pieces[-1]):
            return None
        for cut in range(len(pieces) - 1, 0, -1):
            size, words = "-".join(pieces[:cut]), pieces[cut:-1]
            entry = family.tags.get(size)
            if entry is None or not set(words) <= _VARIANT_WORDS:
                continue
            if entry.source.tag.lower().endswith(".gguf"):
                return None  # the entry names one file: there is no quant to swap
            quant = "F16" if pieces[-1] == "fp16" else pieces[-1].upper()
            return Resolved(f"{family.name}:{tag}", entry.source.with_tag(quant), entry.projector)
        return None

    def names(self) -> list[str]:
        """Every family and ``family:tag``, for suggestions."""
        out: list[str] = []
        for fam in self.families.values():
            out.append(fam.name)
            out += [f"{fam.name}:{t}" for t in fam.tags]
        return out

    def closest(self, name: ModelName, n: int = 3) -> list[str]:
        """Catalogue names that look like ``name`` (a typo, a missing tag, a prefix)."""
        want = (
            name.model.lower()
            if name.namespace == DEFAULT_NAMESPACE
            else f"{name.namespace}/{name.model}".lower()
        )
        fams = [f.name for f in self.families.values()]
        found = difflib.get_close_matches(want, fams, n=n, cutoff=0.6)
        found += [f for f in fams if f.lower().startswith(want) and f not in found]
        return found[:n]

    def unknown(self, name: ModelName) -> ModelNotFound:
        """The one-line error for a name neither in the store nor in the catalogue."""
        shown = name.display.removesuffix(":latest")
        close = self.closest(name)
        hint = f"; closest: {', '.join(close)}" if close else ""
        query = name.model if name.namespace == DEFAULT_NAMESPACE else shown
        return ModelNotFound(
            f"model '{shown}' is not in the catalogue{hint}. Search Hugging Face with "
            f"`localllm search {query}`, or pull hf.co/{{user}}/{{repo}}[:{{quant}}]"
        )


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
    unknown = set(doc) - {"format", "updated", "models"}
    if unknown:
        raise CatalogError(f"{where}: unknown key {sorted(unknown)[0]!r}")
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
    extra = set(value) - _FAMILY_KEYS
    if extra:
        raise CatalogError(f"{where}: unknown key {sorted(extra)[0]!r}")
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
    extra = set(spec) - _TAG_KEYS
    if extra:
        raise CatalogError(f"{where}: unknown key {sorted(extra)[0]!r}")
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
    return Tag(source, projector, layer)


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


_cache: dict[tuple[Any, ...], Catalog] = {}
_cache_lock = threading.Lock()


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def load() -> Catalog:
    """The catalogue in effect now (re-read when one of its files changed)."""
    updated_path, user_path = paths.catalog_data() / "catalog.toml", paths.user_catalog()
    key = (str(updated_path), _stamp(updated_path), str(user_path), _stamp(user_path))
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    families, date = parse(builtin_bytes(), "the built-in catalogue")
    base = "built-in"
    if key[1] is not None:
        try:
            got, got_date = parse(_read(updated_path), str(updated_path), "updated")
        except (CatalogError, OSError) as exc:
            # A damaged download must not stop pulls: the built-in one still works.
            log.warning("ignoring the downloaded catalogue: %s", exc)
        else:
            if date is None or (got_date is not None and got_date > date):
                families, date, base = got, got_date, "updated"
    user_file = None
    if key[3] is not None:
        # A broken user file is an error, not a warning: quietly pulling something other
        # than what the user wrote there would be worse.
        try:
            data = _read(user_path)
        except OSError as exc:
            raise CatalogError(f"{user_path}: {exc.strerror or exc}") from None
        own, _ = parse(data, str(user_path), "user")
        families, user_file = merge(families, own), user_path
        for fam in families.values():
            if fam.latest is not None and fam.latest not in fam.tags:
                raise CatalogError(
                    f"{user_path}: models.{fam.name}.latest: {fam.name} has no tag {fam.latest!r}"
                )
    catalog = Catalog(families, date, base, user_file)
    with _cache_lock:
        _cache.clear()  # one entry: the files only move forward
        _cache[key] = catalog
    return catalog


def _read(path: Path) -> bytes:
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)  # bounded: a huge file is refused by parse()
    return data


def resolve(name: ModelName) -> Resolved | None:
    """The catalogue entry for a library-style ``name``; None for ``hf.co`` names.

    Raises the one-line ``ModelNotFound`` (closest names and a search hint) for a
    library-style name the catalogue does not have.
    """
    if name.is_hf:
        return None
    catalog = load()
    found = catalog.resolve(name)
    if found is None:
        raise catalog.unknown(name)
    return found
