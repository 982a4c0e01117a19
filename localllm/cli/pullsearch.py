"""``pull`` and ``run`` of a name no source knows: offer a GGUF repo from a Hugging Face
search, and pull it only when the user says so.

The daemon resolves library names (the catalogue, then Ollama's registry) and answers
**404** "model 'NAME' is not in the catalogue ..." when none has the name.  That
answer is the only one handled here (``unknown``): a family the catalogue has with a
tag it lacks, or an ``hf.co`` name, stays an error.  Then, on the client's side, where
the question can be asked:

1. the Hub is searched through the daemon (``GET /api/search``, what ``localllm
   search`` shows) for the name without its tag (``qwen3.5:9b`` -> ``qwen3.5``), and,
   when that finds nothing to offer, with a dash between letters and digits
   (``gemma4`` -> ``gemma-4``, as the repos spell it);
2. only repos of known publishers are considered (``choose``): ggml-org, unsloth,
   bartowski, lmstudio-community, and the model's own organisation.  That is the
   namespace the user typed (``someorg/model``), or an organisation whose model a
   known publisher's repo names as its base (the Hub's ``base_model`` tags): a repo
   cannot vouch for itself, so a popular upload by anyone else is never offered;
3. with a tag other than ``latest``, a repo must have it: a quant (``q8_0``, pulled
   as ``hf.co/{repo}:Q8_0``) or a size in the repo's name (``9b``);
4. the most downloaded of those is shown, then pulled only if confirmed: asked on a
   terminal, or ``--yes``.  Otherwise the command prints the suggestion with the
   command that pulls it and exits with status 1.  Nothing is ever pulled silently.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from localllm.errors import InvalidRequest, LocalLLMError, ModelNotFound

if TYPE_CHECKING:
    from localllm.api.client import Client
    from localllm.api.wire import SearchModel, SearchQuant
    from localllm.store.names import ModelName

KNOWN_PUBLISHERS = ("ggml-org", "unsloth", "bartowski", "lmstudio-community")
SEARCH_LIMIT = 10  # repos per search: what `localllm search` shows by default
_QUANT_RE = re.compile(r"^(i?q\d(?:_[a-z0-9]+)*|f16|bf16|f32|mxfp4)$", re.IGNORECASE)
DEFAULT_QUANT = "Q4_K_M"  # what the daemon pulls from a repo when no quant is named


@dataclass(frozen=True)
class Offer:
    """The repo offered for an unknown name."""

    pull: str  # what to pull: hf.co/{repo}, or hf.co/{repo}:{quant} for a quant tag
    repo: str
    publisher: str  # "unsloth", or "google, the model's own organisation"
    downloads: int
    quant: SearchQuant | None  # the files it would pull, when the search listed them


def unknown(exc: ModelNotFound, model: str) -> bool:
    """Whether ``exc``, from pulling ``model``, says that no source has the name."""
    from localllm.store.names import parse_name

    try:
        name = parse_name(model)
    except LocalLLMError:
        return False
    # The daemon's answer carries no code of its own: a 404 for a library name whose
    # text says the catalogue (the last source asked) lacks the family.
    return not name.is_hf and "not in the catalogue" in exc.message


def confirm(
    client: Client,
    model: str,
    exc: ModelNotFound,
    *,
    yes: bool,
    command: str,
    as_name: str | None = None,
) -> str:
    """What to pull instead of the unknown ``model``: an ``hf.co`` name from a search, once
    confirmed.  Raises ``exc`` itself for any other 404, and an error (exit status 1)
    when nothing is offered or the offer is not confirmed."""
    from localllm.cli.termsafe import clean
    from localllm.store.names import parse_name

    if not unknown(exc, model):
        raise exc
    name = parse_name(model)
    shown = name.display.removesuffix(":latest")
    print(f"{shown} is not in the catalogue; searching Hugging Face for it", file=sys.stderr)
    try:
        offer = find(client, name)
    except LocalLLMError as err:
        raise ModelNotFound(f"{exc.message} (searching Hugging Face failed: {err})") from None
    if offer is None:
        raise ModelNotFound(
            f"{exc.message}. Hugging Face has no GGUF of it from a known publisher "
            f"({', '.join(KNOWN_PUBLISHERS)} or the model's own organisation)"
        )
    print(f"found {clean(describe(offer))}", file=sys.stderr)
    if yes:
        return offer.pull
    again = f"localllm {command} {offer.pull}" + (f" --as {as_name}" if as_name else "")
    if sys.stdin.isatty() and sys.stderr.isatty():
        print(f"Pull {clean(offer.pull)}? [y/N] ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline().strip().lower() in ("y", "yes"):
            return offer.pull
        raise InvalidRequest(f"not pulled; later: {clean(again)}")
    raise InvalidRequest(
        f"not pulled without confirmation: run `{clean(again)}`, or add --yes to take "
        "what the search offers"
    )


def find(client: Client, name: ModelName) -> Offer | None:
    """The best repo for ``name`` from one or two searches (see the module's text)."""
    for query in queries(name):
        offer = choose(client.search(query, SEARCH_LIMIT), name)
        if offer is not None:
            return offer
    return None


def queries(name: ModelName) -> list[str]:
    """``gemma4`` -> ``["gemma4", "gemma-4"]``: the name, then as repos spell it."""
    dashed = re.sub(r"(?<=[A-Za-z]{2})(?=\d)", "-", name.model)  # not bge-m3's m3
    return list(dict.fromkeys([name.model, dashed]))


def _owner(repo: str) -> str:
    return repo.split("/", 1)[0].lower()


def own_organisations(models: list[SearchModel], name: ModelName) -> set[str]:
    """The namespace typed (``someorg/model``), and the owners of the base models that
    known publishers' repos name: whose model this is, by someone else's word."""
    from localllm.store.names import DEFAULT_NAMESPACE

    own = {name.namespace.lower()} if name.namespace != DEFAULT_NAMESPACE else set()
    for m in models:
        if _owner(m["repo"]) in KNOWN_PUBLISHERS:
            own |= {_owner(b) for b in m.get("base_models") or [] if "/" in b}
    return own


def choose(models: list[SearchModel], name: ModelName) -> Offer | None:
    """The most downloaded repo of a known publisher that has ``name``'s tag; None if none."""
    own = own_organisations(models, name)
    tag = name.tag.lower()
    best: Offer | None = None
    for m in models:
        repo, owner = m["repo"], _owner(m["repo"])
        if owner in KNOWN_PUBLISHERS:
            publisher = owner
        elif owner in own:
            publisher = f"{repo.split('/', 1)[0]}, the model's own organisation"
        else:
            continue
        quants = m.get("quants") or []
        if not quants:  # nothing listed in time: there is no file to show or pull
            continue
        found = _with_tag(repo, quants, tag)
        if found is None:
            continue
        pull, quant = found
        downloads = int(m.get("downloads") or 0)
        if best is None or downloads > best.downloads:
            best = Offer(pull, repo, publisher, downloads, quant)
    return best


def _with_tag(
    repo: str, quants: list[SearchQuant], tag: str
) -> tuple[str, SearchQuant | None] | None:
    """What pulls ``tag`` from ``repo`` and the quant it gets; None when it lacks the tag."""
    by_tag = {str(q.get("tag", "")).lower(): q for q in quants}
    if tag == "latest":
        return f"hf.co/{repo}", by_tag.get(DEFAULT_QUANT.lower())
    if _QUANT_RE.fullmatch(tag):
        quant = by_tag.get(tag)
        return (f"hf.co/{repo}:{quant['tag']}", quant) if quant is not None else None
    if re.search(rf"(?<![a-z0-9]){re.escape(tag)}(?![a-z0-9])", repo.lower()):
        return f"hf.co/{repo}", by_tag.get(DEFAULT_QUANT.lower())
    return None


def describe(offer: Offer) -> str:
    """``hf.co/unsloth/X-GGUF (unsloth; 1.2M downloads; Q4_K_M 5.7 GB: fits ...)``."""
    from localllm.format import format_bytes, format_count as count

    facts = [offer.publisher, f"{count(offer.downloads)} downloads"]
    if offer.quant is not None:
        size = format_bytes(int(offer.quant.get("size") or 0))
        fit = str((offer.quant.get("fit") or {}).get("summary") or "")
        facts.append(f"{offer.quant.get('tag')} {size}" + (f": {fit}" if fit else ""))
    return f"{offer.pull} ({'; '.join(facts)})"
