"""The Hugging Face Hub side of a pull: list a GGUF repo and choose the files a tag names.

``list_repo`` reads the repo's tree with our own client (``store/hubhttp.py``:
no transparent decompression, bounded answers, next pages only on the Hub).

``hf.co/{user}/{repo}[:{tag}]``: the tag is a quant (case-insensitive, matched
as a filename suffix before ``.gguf``, e.g. ``Q4_K_M`` or ``IQ3_S-imat``) or a
full file name.  No tag (``latest``) picks Q4_K_M, else the first present of
``QUANT_ORDER``.  ``mmproj`` files never become the model layer, and split
GGUFs (``-00001-of-0000N.gguf``) are one choice of N files in order.

The Hub is asked at call time with ``HF_ENDPOINT`` and ``HF_TOKEN`` read then
(``huggingface_hub`` reads its environment once, at import).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from localllm import tls
from localllm.errors import LocalLLMError, ModelNotFound, PullError

if TYPE_CHECKING:
    import httpx

    from localllm.store.hubhttp import HubStatusError

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
REVISION = "main"
MAX_TREE_PAGES = 100  # the Hub sends 1000 files a page
MAX_SIZE = 1 << 50  # a larger size in a listing is not believed
LIST_RETRIES = 3
LIST_BACKOFF_S = 0.5
_SHA_RE = re.compile(r"[0-9a-f]{64}")
# Sensible fallbacks when the default Q4_K_M is absent: similar size and quality first.
QUANT_ORDER = (
    "Q4_K_M",
    "Q4_K_S",
    "Q5_K_M",
    "Q4_0",
    "Q5_K_S",
    "Q5_0",
    "IQ4_XS",
    "IQ4_NL",
    "Q6_K",
    "Q8_0",
    "Q4_1",
    "Q5_1",
    "Q3_K_L",
    "Q3_K_M",
    "IQ3_M",
    "Q3_K_S",
    "IQ3_S",
    "IQ3_XS",
    "IQ3_XXS",
    "Q2_K",
    "IQ2_M",
    "IQ2_S",
    "IQ2_XS",
    "IQ2_XXS",
    "IQ1_M",
    "IQ1_S",
    "BF16",
    "F16",
    "F32",
)
_SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|T?Q\d_\d|BF16|F16|F32|MXFP4)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
# Small repo files that become layers like the Hub's Ollama manifests do.
EXTRA_FILES = ("template", "system", "params")


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    sha256: str | None  # LFS oid; None for files kept in git

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Choice:
    repo_id: str
    label: str  # the quant chosen, e.g. "Q4_K_M" (or the file stem)
    files: list[HubFile]  # model files, shards in order
    how: str  # "requested", "default" or "fallback"
    extras: dict[str, HubFile] = field(default_factory=dict)  # template/system/params


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def transport_errors() -> tuple[type[BaseException], ...]:
    """What a failed connection raises: huggingface_hub 2 talks through httpx2, 1.x and
    our own downloader through httpx (an unmapped httpx2 error became a bare 500)."""
    import httpx

    errors: list[type[BaseException]] = [httpx.HTTPError, OSError]
    try:
        import httpx2  # type: ignore[import-not-found, unused-ignore]

        errors.append(httpx2.HTTPError)
    except ImportError:
        pass
    return tuple(errors)


def list_repo(
    repo_id: str, *, client: httpx.Client | None = None, pages: int = MAX_TREE_PAGES
) -> list[HubFile]:
    """Every file of the repo with its size and LFS sha256: ``GET /api/models/{repo}/tree/main
    ?recursive=true``, read and paged safely (``hubhttp.get_json``), at most ``pages`` pages.

    A 429 or 5xx answer, or a failed connection, is tried again (``LIST_RETRIES``) unless
    ``client`` is given: a caller with its own client (the search) has its own deadline.
    """
    import httpx

    own = client is None
    http = client or httpx.Client(
        follow_redirects=True, timeout=httpx.Timeout(30.0, connect=10.0), verify=tls.context()
    )
    url: str | None = f"{endpoint()}/api/models/{repo_id}/tree/{REVISION}"
    params: dict[str, str] | None = {"recursive": "true"}
    out: list[HubFile] = []
    try:
        for page in range(pages):
            if url is None:
                break
            data, nxt = _page(http, repo_id, url, params, LIST_RETRIES if own else 0)
            if not isinstance(data, list):
                raise PullError(f"the Hub's tree of hf.co/{repo_id} is not a list", status=502)
            out.extend(tree_files(data))
            url, params = nxt, None
            if url is not None and page == pages - 1:
                log.warning("hf.co/%s: listed %d pages of files; not reading more", repo_id, pages)
    except transport_errors() as exc:
        raise PullError(f"cannot reach the Hub at {endpoint()}: {exc}", status=502) from None
    finally:
        if own:
            http.close()
    return out


def _page(
    http: httpx.Client, repo_id: str, url: str, params: dict[str, str] | None, retries: int
) -> tuple[Any, str | None]:
    from localllm.store import hubhttp

    for attempt in range(retries + 1):
        try:
            return hubhttp.get_json(http, url, params, endpoint=endpoint(), token=token())
        except hubhttp.HubStatusError as exc:
            if attempt == retries or not _transient(exc.answered):
                raise _listing_error(repo_id, exc) from None
        except transport_errors():
            if attempt == retries:
                raise
        time.sleep(LIST_BACKOFF_S * 2**attempt)
    raise AssertionError("unreachable")


def _transient(status: int) -> bool:
    return status == 429 or (status >= 500 and status != 501)


def _listing_error(repo_id: str, exc: HubStatusError) -> LocalLLMError:
    """The Hub's refusal as ``huggingface_hub`` maps it (its ``X-Error-Code`` first)."""
    if exc.code == "GatedRepo":
        return PullError(
            f"hf.co/{repo_id} is gated: accept its terms on the Hub and set HF_TOKEN", status=403
        )
    if exc.code in ("RepoNotFound", "RevisionNotFound") or exc.answered in (401, 404):
        return ModelNotFound(
            f"pull model manifest: hf.co/{repo_id} not found (or private: set HF_TOKEN)"
        )
    return PullError(f"the Hub answered {exc.answered} listing hf.co/{repo_id}", status=exc.status)


def tree_files(entries: list[Any]) -> list[HubFile]:
    """The files of one page of a tree listing; entries that are not sane files are skipped."""
    out = []
    for e in entries:
        if not isinstance(e, dict) or e.get("type") != "file":
            continue
        path, size, lfs = e.get("path"), e.get("size"), e.get("lfs")
        if not isinstance(path, str) or not path or len(path) > 1024 or ".." in path.split("/"):
            continue
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < MAX_SIZE:
            continue
        sha = lfs.get("oid") if isinstance(lfs, dict) else None
        sha = sha if isinstance(sha, str) and _SHA_RE.fullmatch(sha) else None
        out.append(HubFile(path, size, sha))
    return out


def quant_of(filename: str) -> str:
    """The quant label in a GGUF file name (``...-Q4_K_M.gguf`` -> ``Q4_K_M``), else its stem."""
    stem = _SPLIT_RE.sub("", filename)
    stem = stem[:-5] if stem.lower().endswith(".gguf") else stem
    found = _QUANT_RE.findall(stem)
    return found[-1].upper() if found else stem


def model_groups(files: Iterable[HubFile]) -> dict[str, list[HubFile]]:
    """GGUF model files grouped per choice (``path`` minus the split suffix): shards in order."""
    groups: dict[str, dict[int, HubFile]] = {}
    totals: dict[str, int] = {}
    for f in files:
        low = f.filename.lower()
        if not low.endswith(".gguf") or "mmproj" in low:
            continue
        m = _SPLIT_RE.search(f.path)
        key = f.path[: m.start()] if m else f.path[:-5]
        index, total = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        groups.setdefault(key, {})[index] = f
        totals[key] = total
    # A split set with missing shards cannot be loaded: leave it out.
    return {
        key: [parts[i] for i in range(1, totals[key] + 1)]
        for key, parts in sorted(groups.items())
        if sorted(parts) == list(range(1, totals[key] + 1))
    }


def _matches(key: str, group: list[HubFile], tag: str) -> bool:
    t = tag.lower()
    if t.endswith(".gguf"):
        return any(t in (f.path.lower(), f.filename.lower()) for f in group)
    base = key.rsplit("/", 1)[-1].lower()
    folder = key.rsplit("/", 1)[0].lower() if "/" in key else ""
    if t in (base, folder) or base.endswith(("-" + t, "." + t)):
        return True
    # "_K_M" must not match "...Q4_K_M": an underscore suffix only counts for a whole quant.
    return base.endswith("_" + t) and quant_of(base + ".gguf").lower() == t


def choose(repo_id: str, files: list[HubFile], tag: str) -> Choice:
    """The model files ``tag`` names in the repo; ``ModelNotFound`` lists what is there."""
    groups = model_groups(files)
    if not groups:
        raise ModelNotFound(f"hf.co/{repo_id} has no GGUF model files")
    extras = {f.path: f for f in files if f.path in EXTRA_FILES}
    labels = sorted({quant_of(g[0].filename) for g in groups.values()})
    if tag.lower() not in ("", "latest"):
        for key, group in groups.items():
            if _matches(key, group, tag):
                return Choice(repo_id, quant_of(group[0].filename), group, "requested", extras)
        # Then by the quant found anywhere in the name ("IQ3_S" for "...-IQ3_S-imat.gguf").
        for group in groups.values():
            if quant_of(group[0].filename).lower() == tag.lower():
                return Choice(repo_id, quant_of(group[0].filename), group, "requested", extras)
        raise ModelNotFound(
            f"hf.co/{repo_id} has no file for tag '{tag}'; available: {', '.join(labels)}"
        )
    for quant in QUANT_ORDER:
        for key, group in groups.items():
            if _matches(key, group, quant):
                how = "default" if quant == QUANT_ORDER[0] else "fallback"
                return Choice(repo_id, quant, group, how, extras)
    key, group = next(iter(groups.items()))
    return Choice(repo_id, quant_of(group[0].filename), group, "fallback", extras)
