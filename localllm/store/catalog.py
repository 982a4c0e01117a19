"""The library-name catalogue: ``llama3.2``, ``qwen3:8b``, ``bge-m3`` → a Hugging Face GGUF.

A catalogue is a TOML file (``catalog.toml`` beside this module is the one that
ships; see the comment at its top for the format).  Each *family*
(``llama3.2``) has tags (``1b``, ``3b``), each pointing at an
``hf.co/{user}/{repo}:{quant or file}`` name and, where the repo's automatic
choice would not do, a vision projector; ``latest`` names one of the tags, as
Ollama's ``:latest`` does.  Ollama's long tags resolve too:
``llama3.2:3b-instruct-q8_0`` is the ``3b`` entry with the quant ``Q8_0``.

Three files, later ones winning tag by tag:

1. the built-in catalogue (package data; ``store/catalog_file.py`` reads any one file);
2. the copy ``localllm catalog update`` downloaded (``paths.catalog_data()``),
   used instead of the built-in one only while its signature verifies, and only
   for entries of known publishers, and only when its ``updated`` date is later, so
   an upgrade of localllm is not hidden by a download (``store/catalog_trust.py``);
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localllm import paths
from localllm.errors import ModelNotFound
from localllm.store import catalog_trust
from localllm.store.catalog_file import (
    FORMAT as FORMAT,
    MAX_BYTES as MAX_BYTES,
    CatalogError as CatalogError,
    Family as Family,
    Tag as Tag,
    builtin_bytes as builtin_bytes,
    merge as merge,
    parse as parse,
    read as _read,
)
from localllm.store.names import DEFAULT_HOST, DEFAULT_NAMESPACE, ModelName

log = logging.getLogger(__name__)

# The quant at the end of Ollama's long tags: q4_K_M, q8_0, iq3_m, fp16, bf16, mxfp4.
_QUANT_RE = re.compile(r"^(i?q\d(?:_[a-z0-9]+)*|fp16|f16|bf16|f32|mxfp4)$")
# Words Ollama puts between the size and the quant of an instruct model's tag.  ("text"
# is the base model, which the catalogue does not point at, so it is not one of them.)
_VARIANT_WORDS = frozenset({"instruct", "it", "chat"})


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
    sig_path = updated_path.with_name(updated_path.name + catalog_trust.SIG_SUFFIX)
    key = (
        str(updated_path),
        _stamp(updated_path),
        _stamp(sig_path),
        str(user_path),
        _stamp(user_path),
    )
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    families, date = parse(builtin_bytes(), "the built-in catalogue")
    base = "built-in"
    if key[1] is not None:
        got = _downloaded(updated_path, families)
        if got is not None and catalog_trust.outranks(got[1], date):
            families, date, base = got[0], got[1], "updated"
        elif got is not None:
            log.info(
                "using the built-in catalogue of %s, not the downloaded one of %s: it is "
                "as new or newer",
                date,
                got[1] or "no date",
            )
    user_file = None
    if key[4] is not None:
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


def _downloaded(
    path: Path, builtin: dict[str, Family]
) -> tuple[dict[str, Family], dt.date | None] | None:
    """The downloaded copy's trusted entries and date; None (and a warning) when it is
    damaged or its signature does not verify."""
    try:
        data = _read(path)
        # Checked on every read, not only at update: the file on disk may predate
        # signatures, or have been written by something other than `catalog update`.
        catalog_trust.verify(data, catalog_trust.read_signature(path), str(path))
        got, got_date = parse(data, str(path), "updated")
    except (CatalogError, OSError) as exc:
        # A damaged download must not stop pulls: the built-in one still works.
        log.warning("ignoring the downloaded catalogue: %s", exc)
        return None
    return catalog_trust.keep_known_publishers(got, builtin, str(path)), got_date


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
