"""``localllm catalog update``: download a newer catalogue from a Hugging Face repo.

The repo (``LOCALLLM_CATALOG_REPO``, default ``localllm/catalog``) holds
``catalog.toml`` and, beside it, ``catalog.toml.sha256`` (``sha256sum`` output
or the bare hex digest).  The expected digest is that file's, or the one given
with ``--sha256``, which then pins the exact file and needs no companion.  The
download is bounded (``catalog.MAX_BYTES``), its sha256 checked, and the whole
catalogue validated as the daemon would read it, before it replaces anything: on
any failure the catalogue in use stays as it was.  The new copy is written
atomically (temp file, fsync, rename) into ``paths.catalog_data()``, never into
the installed package, with ``source.json`` beside it saying where it came from.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from localllm import config, paths
from localllm.errors import DigestMismatch, InvalidRequest, PullError
from localllm.store import catalog, hub

FILE = "catalog.toml"
_SHA_RE = re.compile(r"^([0-9a-fA-F]{64})(?:\s+\*?(\S+))?\s*$")
_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(?:/[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})*$")
TIMEOUT = 30.0


@dataclass(frozen=True)
class Update:
    repo: str
    file: str
    sha256: str
    families: int
    tags: int
    updated: dt.date | None
    in_use: bool  # False when the built-in catalogue is newer and stays in use
    path: Path


def update(repo: str | None = None, file: str = FILE, sha256: str | None = None) -> Update:
    """Fetch, check and install the catalogue; see the module docstring."""
    repo = config.CATALOG_REPO.get() if repo is None else _repo(repo)
    if not _FILE_RE.fullmatch(file) or ".." in file.split("/"):
        raise InvalidRequest(f"invalid catalogue file name {file!r}")
    want = _hex(sha256, "--sha256") if sha256 else _expected(repo, file)
    data = _get(repo, file, catalog.MAX_BYTES)
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise DigestMismatch(
            f"hf.co/{repo}/{file}: sha256 {got} does not match the expected "
            f"{want}; the catalogue in use is unchanged"
        )
    where = f"hf.co/{repo}/{file}"
    families, updated = catalog.parse(data, where, "updated")
    if not families:
        raise catalog.CatalogError(f"{where}: has no models")
    folder = paths.catalog_data()
    target = folder / "catalog.toml"
    _write_atomic(target, data)
    meta = {
        "repo": repo,
        "file": file,
        "sha256": got,
        "revision": hub.REVISION,
        "fetched_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "updated": updated.isoformat() if updated else None,
    }
    _write_atomic(folder / "source.json", json.dumps(meta, indent=2).encode() + b"\n")
    builtin_date = catalog.parse(catalog.builtin_bytes(), "the built-in catalogue")[1]
    in_use = builtin_date is None or (updated is not None and updated > builtin_date)
    return Update(
        repo,
        file,
        got,
        len(families),
        sum(len(f.tags) for f in families.values()),
        updated,
        in_use,
        target,
    )


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


def _expected(repo: str, file: str) -> str:
    raw = _get(
        repo,
        file + ".sha256",
        4096,
        missing=(
            f"hf.co/{repo} has no {file}.sha256 beside {file}: nothing to check the download "
            "against (give the digest with --sha256)"
        ),
    )
    try:
        text = raw.decode("ascii").strip().splitlines()[0]
    except (UnicodeDecodeError, IndexError):
        text = ""
    return _hex(text, f"hf.co/{repo}/{file}.sha256")


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
            data = bytearray()
            for chunk in r.iter_bytes():
                data += chunk
                if len(data) > limit:
                    raise catalog.CatalogError(
                        f"hf.co/{repo}/{file}: larger than {limit} bytes; not a catalogue"
                    )
            return bytes(data)
    except httpx.HTTPError as exc:
        raise PullError(f"cannot reach the Hub at {hub.endpoint()}: {exc}", status=502) from None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # the rename itself survives a crash only once the folder is synced
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
