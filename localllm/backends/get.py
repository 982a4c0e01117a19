"""``localllm backends get NAME`` and ``install URL``: a pack fetched, then installed.

``get`` lists the Hugging Face repo of ``LOCALLLM_BACKENDS_REPO`` (the Hub
code of pulls: ``HF_ENDPOINT``, ``HF_TOKEN``) and picks, by file name
(``pack.pack_name``: backend, ggml version, platform, architectures), the
smallest pack for this core's ggml version that covers every GPU here; when
none fits it says what the repo has instead.  The Hub's LFS sha256 of the
chosen file is checked against the table (or ``--trust``) *before* anything is
downloaded, and the download is the pull's (``store.download``): resumed after
a cut, verified against that sha256, into a cache folder of its own.  Then
``install`` checks the file again and the manifest inside it, which is what
counts: a file name is only a hint.  A URL is downloaded whole, bounded, into
the same cache, then installed the same way.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localllm import config, paths
from localllm.backends import catalog
from localllm.backends.install import Installed, check_trust, install
from localllm.backends.manifest import MAX_BYTES, Core, PackError, uncovered
from localllm.backends.pack import SUFFIX
from localllm.errors import ModelNotFound, PullError

Progress = Callable[[int, int], None]  # (bytes done, total)
_NAME = re.compile(
    r"(?P<backend>[a-z]+)-ggml(?P<version>\d+\.\d+\.\d+)-(?P<os>[a-z0-9]+)-"
    r"(?P<machine>[a-z0-9_]+?)(?:-(?P<archs>[a-z0-9_]+))?" + re.escape(SUFFIX)
)


@dataclass(frozen=True)
class Candidate:
    path: str
    size: int
    sha256: str | None
    backend: str
    version: str
    platform: str
    archs: list[str]


def candidates(files: list[tuple[str, int, str | None]]) -> list[Candidate]:
    """The repo's files that are named like packs (path, size, LFS sha256)."""
    out = []
    for path, size, sha in files:
        m = _NAME.fullmatch(path.rsplit("/", 1)[-1])
        if m is None:
            continue
        archs = [
            a.removeprefix("sm") if m["backend"] == "cuda" else a
            for a in (m["archs"] or "").split("_")
            if a
        ]
        out.append(
            Candidate(
                path, size, sha, m["backend"], m["version"], f"{m['os']}-{m['machine']}", archs
            )
        )
    return out


def choose(repo: str, found: list[Candidate], backend: str, core: Core) -> Candidate:
    """The smallest pack that fits, or ``PackError`` saying what the repo has instead."""
    where = f"hf.co/{repo}"
    mine = [c for c in found if c.backend == backend and c.platform == core.platform]
    if not mine:
        raise PackError(
            f"{where} has no {backend} pack for {core.platform}; build the plugin "
            f"here: 'localllm backends build {backend}'"
        )
    same = [c for c in mine if c.version == core.ggml_version]
    if not same:
        have = ", ".join(sorted({c.version for c in mine}))
        raise PackError(
            f"{where} has {backend} packs for ggml {have}, not for this core's "
            f"ggml {core.ggml_version}; build the plugin here: 'localllm backends "
            f"build {backend}'"
        )
    archs = core.archs_for(backend)
    if backend in ("cuda", "rocm") and not archs:
        raise PackError(
            f"no GPU answered, so which {backend} pack fits is unknown: pass "
            "--arch (e.g. --arch 90 for an H100)"
        )
    fits = [c for c in same if not uncovered(backend, c.archs, archs)]
    if not fits:
        have = "; ".join(",".join(c.archs) for c in same)
        raise PackError(
            f"{where} has {backend} packs for ggml {core.ggml_version} built for "
            f"{have}, but this machine's GPUs are {', '.join(archs)}; build "
            f"the plugin here: 'localllm backends build {backend}'"
        )
    return min(fits, key=lambda c: (len(c.archs), c.size, c.path))


def get(
    name: str,
    core: Core,
    *,
    repo: str | None = None,
    trust_arg: str | None = None,
    wheels: Path | None = None,
    progress: Progress | None = None,
    notice: Callable[[str], None] | None = None,
) -> Installed:
    """Fetch the pack of backend ``name`` that fits ``core`` and install it."""
    from localllm.store import hub

    backend = catalog.get(name)
    repo = config.BACKENDS_REPO.get() if repo is None else config.parse_hf_repo(repo)
    if backend.name in ("cuda", "rocm") and not core.archs_for(backend.name):
        raise PackError(
            f"no GPU answered, so which {backend.name} pack fits is unknown: pass "
            "--arch (e.g. --arch 90 for an H100)"
        )
    try:
        listing = hub.list_repo(repo)
    except ModelNotFound:
        raise PackError(
            f"hf.co/{repo} (LOCALLLM_BACKENDS_REPO) not found, or private (set HF_TOKEN)"
        ) from None
    pick = choose(
        repo, candidates([(f.path, f.size, f.sha256) for f in listing]), backend.name, core
    )
    where = f"hf.co/{repo}/{pick.path}"
    if not pick.sha256:
        raise PackError(f"{where} has no LFS sha256 to check it against; not downloaded")
    check_trust(pick.sha256, trust_arg, where)  # before a byte is downloaded
    if notice:
        notice(f"downloading {where} ({pick.size} bytes, sha256 {pick.sha256})")
    path = _download(repo, pick, progress)
    try:
        return install(
            path, core, trust_arg=trust_arg, origin=where, sha256=pick.sha256, wheels=wheels
        )
    finally:
        path.unlink(missing_ok=True)


def _download(repo: str, pick: Candidate, progress: Progress | None) -> Path:
    """The pull's download (resume, retries, sha256) into ``<cache>/packs``."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    from localllm.store import download, hub
    from localllm.store.blobs import BlobStore

    blobs = BlobStore(paths.cache() / "packs")
    digest = f"sha256:{pick.sha256}"
    url = hf_hub_url(repo, pick.path, revision=hub.REVISION, endpoint=hub.endpoint())
    headers = dict(build_hf_headers(token=hub.token()))
    download.fetch(
        blobs,
        digest,
        pick.size,
        url,
        headers,
        lambda done: progress(done, pick.size) if progress else None,
    )
    return blobs.path(digest)


def fetch_url(url: str, progress: Progress | None = None) -> Path:
    """``url`` downloaded whole into ``<cache>/packs`` (at most ``MAX_BYTES``)."""
    import httpx

    folder = paths.cache() / "packs"
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".url-", suffix=SUFFIX, dir=folder)
    os.close(fd)
    target = Path(name)
    done = 0
    try:
        with (
            httpx.Client(follow_redirects=True, timeout=httpx.Timeout(30.0)) as client,
            client.stream("GET", url) as r,
            open(target, "wb") as out,
        ):
            if r.status_code != 200:
                raise PullError(f"{url}: the server answered {r.status_code}", status=502)
            total = int(r.headers.get("content-length") or 0)
            for chunk in r.iter_bytes():
                done += len(chunk)
                if done > MAX_BYTES:
                    raise PackError(f"{url}: larger than {MAX_BYTES} bytes; not a pack")
                out.write(chunk)
                if progress:
                    progress(done, total)
    except httpx.HTTPError as exc:
        target.unlink(missing_ok=True)
        raise PullError(f"cannot download {url}: {exc}", status=502) from None
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target
