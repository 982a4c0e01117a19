"""``localllm catalog update`` and ``reset``: the downloaded catalogue, fetched and removed.

``update`` downloads ``catalog.toml`` from a Hugging Face repo (``LOCALLLM_CATALOG_REPO``,
default ``localllm/catalog``) and, beside it, ``catalog.toml.sig``: the file must be
signed by a key this localllm ships, dated no later than tomorrow, and every entry
must point at a known publisher (``store/catalog_trust.py``; a sha256 from the same
repo would prove nothing).  ``--sha256`` pins one exact file on top of that.  The
download is bounded (``catalog.MAX_BYTES``) and the whole catalogue validated as the
daemon would read it before it replaces anything: on any failure the catalogue in
use stays as it was.  The signature and the copy are written atomically (temp file,
fsync, rename) into ``paths.catalog_data()``, never into the installed package, with
``source.json`` beside them saying where they came from.  ``reset`` removes the three,
so the built-in catalogue is in use again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from localllm import config, paths
from localllm.errors import DigestMismatch, InvalidRequest, PullError
from localllm.store import catalog, catalog_trust, hub
from localllm.store.hubhttp import read_capped
from localllm.store.tempfiles import atomic_write_bytes

FILE = "catalog.toml"
_SHA_RE = re.compile(r"^([0-9a-fA-F]{64})(?:\s+\*?(\S+))?\s*$")
_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(?:/[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})*$")
TIMEOUT = 30.0
_SAVED = (FILE, FILE + catalog_trust.SIG_SUFFIX, "source.json")  # what reset removes


@dataclass(frozen=True)
class Update:
    repo: str
    file: str
    sha256: str
    families: int
    tags: int
    dropped: int  # entries left out: their repos' owners are not known publishers
    updated: dt.date | None
    in_use: bool  # False when the built-in catalogue is as new or newer and stays in use
    path: Path


def update(repo: str | None = None, file: str = FILE, sha256: str | None = None) -> Update:
    """Fetch, check and install the catalogue; see the module docstring."""
    repo = config.CATALOG_REPO.get() if repo is None else _repo(repo)
    if not _FILE_RE.fullmatch(file) or ".." in file.split("/"):
        raise InvalidRequest(f"invalid catalogue file name {file!r}")
    want = _hex(sha256, "--sha256") if sha256 else None
    where = f"hf.co/{repo}/{file}"
    data = _get(repo, file, catalog.MAX_BYTES)
    got = hashlib.sha256(data).hexdigest()
    if want is not None and got != want:
        raise DigestMismatch(
            f"{where}: sha256 {got} does not match the expected {want}; "
            "the catalogue in use is unchanged"
        )
    sig = _get(
        repo,
        file + catalog_trust.SIG_SUFFIX,
        catalog_trust.SIG_MAX_BYTES,
        missing=f"hf.co/{repo} has no {file}.sig beside {file}: an unsigned catalogue "
        "is not used; the catalogue in use is unchanged",
    )
    catalog_trust.verify(data, sig, where)
    families, updated = catalog.parse(data, where, "updated")
    catalog_trust.check_date(updated, where)
    builtin, builtin_date = catalog.parse(catalog.builtin_bytes(), "the built-in catalogue")
    kept = catalog_trust.keep_known_publishers(families, builtin, where)
    tags = sum(len(f.tags) for f in kept.values())
    if not kept:
        raise catalog.CatalogError(f"{where}: has no models from known publishers")
    folder = paths.catalog_data()
    target = folder / FILE
    # The signature first: a crash between the two leaves a pair that does not verify,
    # which load() ignores, rather than a copy that does with the old signature.
    atomic_write_bytes(folder / _SAVED[1], sig)
    atomic_write_bytes(target, data)
    meta = {
        "repo": repo,
        "file": file,
        "sha256": got,
        "revision": hub.REVISION,
        "fetched_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "updated": updated.isoformat() if updated else None,
    }
    atomic_write_bytes(folder / "source.json", json.dumps(meta, indent=2).encode() + b"\n")
    return Update(
        repo,
        file,
        got,
        len(kept),
        tags,
        sum(len(f.tags) for f in families.values()) - tags,
        updated,
        catalog_trust.outranks(updated, builtin_date),
        target,
    )


def reset() -> list[Path]:
    """Remove the downloaded catalogue, its signature and ``source.json``: the files removed
    (none when there was no download)."""
    removed = []
    for name in _SAVED:
        path = paths.catalog_data() / name
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    return removed


def source() -> dict[str, object] | None:
    """Where the downloaded catalogue came from (``source.json``), if there is one."""
    try:
        value = json.loads((paths.catalog_data() / "source.json").read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _repo(raw: str) -> str:
    try:
        return config.parse_hf_repo(raw.strip().removeprefix("hf.co/"))
    except ValueError:
        raise InvalidRequest(f"invalid Hugging Face repo {raw!r}: expected user/name") from None


def _hex(raw: str, where: str) -> str:
    match = _SHA_RE.fullmatch(raw.strip().removeprefix("sha256:"))
    if match is None:
        raise InvalidRequest(f"{where}: expected a sha256 (64 hex digits)")
    return match.group(1).lower()


def _get(repo: str, file: str, limit: int, *, missing: str | None = None) -> bytes:
    """One file of the repo, at most ``limit`` bytes (more is an error, not a truncation)."""
    import httpx
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    url = hf_hub_url(repo, file, revision=hub.REVISION, endpoint=hub.endpoint())
    headers = build_hf_headers(token=hub.token())
    try:
        with (
            httpx.Client(follow_redirects=True, timeout=TIMEOUT) as client,
            client.stream("GET", url, headers=headers) as r,
        ):
            if r.status_code == 404:
                code = r.headers.get("x-error-code", "")
                what = (
                    f"hf.co/{repo} not found"
                    if code == "RepoNotFound"
                    else (missing or f"hf.co/{repo} has no {file}")
                )
                raise PullError(what, status=404)
            if r.status_code in (401, 403):
                raise PullError(
                    f"hf.co/{repo}: access denied ({r.status_code}); private or "
                    "gated repos need HF_TOKEN",
                    status=r.status_code,
                )
            if r.status_code != 200:
                raise PullError(
                    f"the Hub answered {r.status_code} for hf.co/{repo}/{file}", status=502
                )
            return read_capped(
                r.iter_bytes(),
                limit,
                lambda: catalog.CatalogError(
                    f"hf.co/{repo}/{file}: larger than {limit} bytes; not a catalogue"
                ),
            )
    except httpx.HTTPError as exc:
        raise PullError(f"cannot reach the Hub at {hub.endpoint()}: {exc}", status=502) from None
