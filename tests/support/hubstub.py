"""A local stand-in for the Hugging Face Hub, enough for ``huggingface_hub`` 2.4 and our pulls.

Serves, on ``127.0.0.1:<free port>`` from a thread:

* ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the file list with ``oid``,
  ``size`` and, for LFS files (``*.gguf`` and anything added with
  ``lfs=True``), ``lfs: {oid: <sha256>, size, pointerSize}``;
  ``GET /api/models/{repo}[/revision/{rev}]``: model info with ``siblings``.
* ``HEAD|GET /{repo}/resolve/{rev}/{path}``: small files inline; LFS files
  answer ``302`` to a "CDN" URL on another origin (``localhost`` instead of
  ``127.0.0.1``, so clients drop ``Authorization`` like with the real CDN)
  with ``X-Repo-Commit``, ``X-Linked-Etag`` and ``X-Linked-Size``.
* ``GET|HEAD /cdn/{sha256}``: the bytes, ``Range: bytes=a-b`` -> ``206`` with
  ``Content-Range`` (the ``resolve`` path answers ranges of inline files too).
* ``GET /api/models?search=&filter=gguf&sort=downloads&limit=N&expand[]=...``:
  the model search, repos whose id contains ``search`` (case-insensitive),
  most downloaded first; ``expand[]`` (or ``expand``) asks for fields as the
  Hub does (then only those and ``id``/``_id`` come back): ``downloads``,
  ``likes``, ``lastModified``, ``pipeline_tag``, ``tags``, ``library_name``
  and ``gguf`` (``total`` parameters, ``architecture``, ``context_length``,
  ``chat_template``, ``bos_token``, ``eos_token``, read from the repo's first
  model GGUF with the ``gguf`` package).  ``GET /api/models/{repo}`` takes
  ``expand[]`` the same way.  ``set_meta`` sets a repo's downloads, likes,
  last update and pipeline tag.
* Errors like the Hub: ``404`` with ``X-Error-Code: RepoNotFound``,
  ``RevisionNotFound`` or ``EntryNotFound``; private repos answer ``401``
  without the right ``Authorization: Bearer``.

Faults, per file path: ``cut_once[path] = n`` closes the connection after n
body bytes the next time it is served; ``corrupt.add(path)`` flips a byte of
every copy served; ``delay_s`` sleeps per 64 KiB chunk.  ``requests`` logs
every request (method, path, Range and Authorization headers); ``api_status``
makes every ``/api`` call fail with that status.  ``served[path]`` counts the
body bytes sent of each file.  Hostile answers to range requests, per path:
``ignore_range`` (a ``200`` with the whole file), ``lie_total[path] = n`` (a
``Content-Range`` total of ``n``), ``extra_bytes`` (more bytes than asked);
``api_delay_s[repo]`` delays that repo's tree listing.

Hostile or slow API answers (issue 36): ``search_gate`` (an Event) holds every
model search until it is set, ``search_waiting`` counting those held;
``api_gzip = n`` sends every ``/api`` JSON answer gzip-compressed whatever the
client asked, padded with ``n`` spaces first (a bomb: 1 GB of padding is 1 MB
on the wire); ``api_deep = n`` answers every ``/api`` call with ``n`` nested
lists; ``tree_page = n`` pages tree listings ``n`` files at a time (``cursor``
and a ``Link: <...>; rel="next"`` header, as the Hub does), and ``tree_next``,
if set, is sent as every tree page's next link instead (``{url}`` is replaced
by the stand-in's URL).

``add_vision_repo`` fills a repo like a real vision model's: three quants of a
tiny model and two projector files (``mmproj-F16``, ``mmproj-F32``).
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_CHUNK = 64 << 10


@dataclass
class StubFile:
    path: str
    disk: Path
    size: int
    sha256: str
    git_oid: str
    lfs: bool


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    auth: str | None


@dataclass
class HubStub:
    root: Path
    repos: dict[str, dict[str, StubFile]] = field(default_factory=dict)
    private: dict[str, str] = field(default_factory=dict)  # repo -> required token
    cut_once: dict[str, int] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)
    delay_s: float = 0.0
    api_status: int | None = None  # answer every /api call with this status
    requests: list[Request] = field(default_factory=list)
    served: dict[str, int] = field(default_factory=dict)  # body bytes sent, per file path
    ignore_range: set[str] = field(default_factory=set)
    lie_total: dict[str, int] = field(default_factory=dict)
    extra_bytes: set[str] = field(default_factory=set)
    api_delay_s: dict[str, float] = field(default_factory=dict)  # repo -> tree listing delay
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    search_gate: threading.Event | None = None
    search_waiting: int = 0
    api_gzip: int | None = None
    api_deep: int = 0
    tree_page: int = 0
    tree_next: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: _Server | None = None

    # -- content -----------------------------------------------------------------
    def add_file(
        self,
        repo: str,
        path: str,
        data: bytes | Path,
        *,
        lfs: bool | None = None,
        sha256: str | None = None,
    ) -> StubFile:
        """Serve ``data`` as ``repo``'s ``path``.  ``sha256``: the LFS oid to list instead of
        hashing the file (a huge sparse one that is only ever read in ranges)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            disk = self.root / hashlib.sha256(f"{repo}/{path}".encode()).hexdigest()
            disk.write_bytes(data)
        else:
            disk = data
        if sha256 is None:
            h = hashlib.sha256()
            with open(disk, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
            sha256 = h.hexdigest()
        size = disk.stat().st_size
        is_lfs = path.endswith(".gguf") if lfs is None else lfs
        oid = hashlib.sha1(f"blob {size}\0{path}".encode()).hexdigest()
        f = StubFile(path, disk, size, sha256, oid, is_lfs)
        self.repos.setdefault(repo, {})[path] = f
        return f

    def add_repo(self, repo: str) -> None:
        self.repos.setdefault(repo, {})

    def set_meta(
        self,
        repo: str,
        *,
        downloads: int | None = None,
        likes: int | None = None,
        updated: str | None = None,
        pipeline_tag: str | None = None,
        tags: list[str] | None = None,
    ) -> None:
        """What the search reports for ``repo`` besides its files (``updated``: RFC 3339)."""
        m = self.meta.setdefault(repo, {})
        for key, value in (
            ("downloads", downloads),
            ("likes", likes),
            ("lastModified", updated),
            ("pipeline_tag", pipeline_tag),
            ("tags", tags),
        ):
            if value is not None:
                m[key] = value

    def model_entry(self, repo: str, expand: list[str]) -> dict[str, Any]:
        """The search's (and model info's) object for ``repo``, as the Hub shapes it."""
        files = self.repos.get(repo, {})
        m = self.meta.get(repo, {})
        full: dict[str, Any] = {
            "downloads": m.get("downloads", 0),
            "likes": m.get("likes", 0),
            "lastModified": m.get("lastModified", "2025-01-01T00:00:00.000Z"),
            "pipeline_tag": m.get("pipeline_tag", "text-generation"),
            "tags": m.get("tags", ["gguf"]),
            "library_name": "gguf",
            "createdAt": "2024-06-01T00:00:00.000Z",
            "private": False,
        }
        if "gguf" in expand:
            full["gguf"] = _gguf_details(files)
        base: dict[str, Any] = {"_id": hashlib.sha1(repo.encode()).hexdigest()[:24], "id": repo}
        if expand:
            return {**base, **{k: full[k] for k in expand if k in full}}
        return {
            **base,
            "modelId": repo,
            **{k: v for k, v in full.items() if k not in ("lastModified", "gguf")},
        }

    def count(self, method: str, path_part: str) -> int:
        return sum(1 for r in list(self.requests) if r.method == method and path_part in r.path)

    # -- server ------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HubStub:
        stub = self

        class Handler(_Handler):
            hub = stub

        self._server = _Server(("127.0.0.1", 0), Handler)
        # Not tests.support.threadserver: packaging/smoke.py loads this file by its path,
        # outside the source tree's packages, so it imports nothing of the tests.
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that hung up early (tests do that on purpose)
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    hub: HubStub
    protocol_version = "HTTP/1.1"
    query: dict[str, list[str]]

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    # -- helpers -------------------------------------------------------------------
    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        *,
        head: bool = False,
    ) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, head: bool) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(
            status,
            body,
            {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"},
            head=head,
        )

    def _repo(self, repo: str, head: bool) -> dict[str, StubFile] | None:
        files = self.hub.repos.get(repo)
        need = self.hub.private.get(repo)
        if files is None or (need and self.headers.get("Authorization") != f"Bearer {need}"):
            self._error(
                401 if files is not None else 404, "RepoNotFound", "Repository not found", head
            )
            return None
        return files

    def _route(self, head: bool) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        self.query = parse_qs(parts.query)
        self.hub.requests.append(
            Request(
                self.command, path, self.headers.get("Range"), self.headers.get("Authorization")
            )
        )
        segs = path.strip("/").split("/")
        if segs[0] == "api" and self.hub.api_status is not None:
            self._send(self.hub.api_status, b"Internal Error", head=head)
        elif segs == ["api", "models"]:
            self._search(head)
        elif segs[:2] == ["api", "models"] and len(segs) >= 4:
            repo = "/".join(segs[2:4])
            files = self._repo(repo, head)
            if files is None:
                return
            rest = segs[4:]
            if rest and rest[0] in ("tree", "revision") and len(rest) >= 2 and rest[1] != "main":
                self._error(404, "RevisionNotFound", "Invalid rev id", head)
            elif rest and rest[0] == "tree":
                prefix = "/".join(rest[2:])
                if self.hub.api_delay_s.get(repo):
                    time.sleep(self.hub.api_delay_s[repo])
                self._tree(
                    [
                        _tree_entry(f)
                        for f in files.values()
                        if not prefix or f.path.startswith(prefix + "/")
                    ],
                    path,
                    head,
                )
            else:
                self._json(
                    {
                        "modelId": repo,
                        "sha": COMMIT,
                        "private": False,
                        "siblings": [{"rfilename": f.path} for f in files.values()],
                        **self.hub.model_entry(repo, self._expand()),
                    },
                    head,
                )
        elif len(segs) >= 5 and segs[2] == "resolve":
            self._resolve("/".join(segs[:2]), segs[3], "/".join(segs[4:]), head)
        elif segs[0] == "cdn" and len(segs) == 2:
            self._cdn(segs[1], head)
        else:
            self._error(404, "NotFound", "not found", head)

    def _expand(self) -> list[str]:
        return [*self.query.get("expand[]", []), *self.query.get("expand", [])]

    def _tree(self, entries: list[dict[str, Any]], path: str, head: bool) -> None:
        """One page of a tree listing, with the next page's link when paged."""
        size, nxt = self.hub.tree_page, self.hub.tree_next
        if not size and nxt is None:
            self._json(entries, head)
            return
        at = int((self.query.get("cursor") or ["0"])[0])
        page = entries[at : at + size] if size else entries
        if nxt is None and at + size < len(entries):
            nxt = f"{{url}}{path}?recursive=true&cursor={at + size}"
        link = {"Link": f'<{nxt.format(url=self.hub.url)}>; rel="next"'} if nxt else {}
        self._json(page, head, link)

    def _search(self, head: bool) -> None:
        q = self.query
        gate = self.hub.search_gate
        if gate is not None:
            with self.hub.lock:
                self.hub.search_waiting += 1
            try:
                gate.wait(60)
            finally:
                with self.hub.lock:
                    self.hub.search_waiting -= 1
        text = (q.get("search") or [""])[0].lower()
        gguf_only = "gguf" in q.get("filter", [])
        found = [
            repo
            for repo, files in self.hub.repos.items()
            if text in repo.lower()
            and repo not in self.hub.private
            and (not gguf_only or any(p.endswith(".gguf") for p in files))
        ]
        if (q.get("sort") or [""])[0] == "downloads":
            found.sort(key=lambda r: -int(self.hub.meta.get(r, {}).get("downloads", 0)))
        limit = int((q.get("limit") or ["1000"])[0])
        self._json([self.hub.model_entry(r, self._expand()) for r in found[:limit]], head)

    def _json(self, value: Any, head: bool, extra: dict[str, str] | None = None) -> None:
        headers = {"Content-Type": "application/json", **(extra or {})}
        body = json.dumps(value).encode()
        if self.hub.api_deep:
            body = b"[" * self.hub.api_deep + b"]" * self.hub.api_deep
        if self.hub.api_gzip is not None:
            import zlib

            z = zlib.compressobj(9, zlib.DEFLATED, 31)  # the gzip container
            out, pad = [z.compress(body)], b" " * (1 << 20)
            for at in range(0, self.hub.api_gzip, len(pad)):
                out.append(z.compress(pad[: self.hub.api_gzip - at]))
            body = b"".join(out) + z.flush()
            headers["Content-Encoding"] = "gzip"
        self._send(200, body, headers, head=head)

    def _resolve(self, repo: str, rev: str, fpath: str, head: bool) -> None:
        files = self._repo(repo, head)
        if files is None:
            return
        if rev != "main":
            self._error(404, "RevisionNotFound", "Invalid rev id", head)
            return
        f = files.get(fpath)
        if f is None:
            self._error(404, "EntryNotFound", f"{fpath} does not exist on main", head)
            return
        common = {"X-Repo-Commit": COMMIT, "Accept-Ranges": "bytes"}
        if f.lfs:
            host = f"http://localhost:{self.hub.port}"
            self._send(
                302,
                b"",
                {
                    **common,
                    "Location": f"{host}/cdn/{f.sha256}",
                    "X-Linked-Etag": f'"{f.sha256}"',
                    "X-Linked-Size": str(f.size),
                    "ETag": f'"{f.git_oid}"',
                },
                head=head,
            )
        else:
            # A git_oid set to ``W/"..."`` is sent as that weak ETag.
            etag = f.git_oid if f.git_oid.startswith("W/") else f'"{f.git_oid}"'
            self._bytes(f, head, {**common, "ETag": etag})

    def _cdn(self, sha: str, head: bool) -> None:
        f = next(
            (f for files in self.hub.repos.values() for f in files.values() if f.sha256 == sha),
            None,
        )
        if f is None:
            self._send(404, b"NoSuchKey", head=head)
            return
        self._bytes(f, head, {"ETag": f'"{f.sha256}"'})

    def _bytes(self, f: StubFile, head: bool, headers: dict[str, str]) -> None:
        """The file, or the range asked for (``206``), with the faults set for its path."""
        start, end = 0, f.size - 1
        status = 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and f.path not in self.hub.ignore_range:
            a, _, b = rng[6:].partition("-")
            start = int(a) if a else 0
            end = min(int(b), f.size - 1) if b else f.size - 1
            if start >= f.size:
                self._send(416, b"", {"Content-Range": f"bytes */{f.size}"}, head=head)
                return
            status = 206
        extra = min(4096, f.size - 1 - end) if f.path in self.hub.extra_bytes else 0
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(end - start + 1 + extra))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            total = self.hub.lie_total.get(f.path, f.size)
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        self.end_headers()
        if head:
            return
        end += extra
        cut = self.hub.cut_once.pop(f.path, None)
        sent = 0
        with open(f.disk, "rb") as fh:
            fh.seek(start)
            left = end - start + 1
            while left:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:
                    break
                if f.path in self.hub.corrupt and start + sent <= f.size // 2 < start + sent + len(
                    chunk
                ):
                    i = f.size // 2 - start - sent
                    chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1 :]
                if cut is not None and sent + len(chunk) >= cut:
                    self.wfile.write(chunk[: cut - sent])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(chunk)
                sent += len(chunk)
                left -= len(chunk)
                self.hub.served[f.path] = self.hub.served.get(f.path, 0) + len(chunk)
                if self.hub.delay_s:
                    time.sleep(self.hub.delay_s)


def _gguf_details(files: dict[str, StubFile]) -> dict[str, Any] | None:
    """The Hub's ``gguf`` field: from the first model GGUF of the repo, by path."""
    from gguf import GGUFReader

    models = sorted(p for p in files if p.endswith(".gguf") and "mmproj" not in p.lower())
    if not models:
        return None
    try:
        reader = GGUFReader(files[models[0]].disk)
    except (ValueError, OSError, IndexError):
        return None  # the Hub has no details for a file it cannot parse
    arch = str(reader.fields["general.architecture"].contents())
    out: dict[str, Any] = {
        "total": sum(int(t.n_elements) for t in reader.tensors),
        "architecture": arch,
    }
    ctx = reader.fields.get(f"{arch}.context_length")
    if ctx is not None:
        out["context_length"] = int(ctx.contents())
    template = reader.fields.get("tokenizer.chat_template")
    if template is not None:
        out["chat_template"] = str(template.contents())
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    for role in ("bos", "eos"):
        tid = reader.fields.get(f"tokenizer.ggml.{role}_token_id")
        if tid is not None and tokens is not None:
            out[f"{role}_token"] = str(tokens.contents(int(tid.contents())))
    return out


def _tree_entry(f: StubFile) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path}
    if f.lfs:
        entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
    return entry


VISION_QUANTS = ("Q4_K_M", "Q8_0", "BF16")
VISION_PROJECTORS = ("F16", "F32")


def add_vision_repo(
    stub: HubStub, folder: Path, repo: str, *, projector: Path | None = None
) -> dict[str, StubFile]:
    """Serve ``repo`` with ``Tiny-{quant}.gguf`` for ``VISION_QUANTS`` and
    ``mmproj-Tiny-{precision}.gguf`` for ``VISION_PROJECTORS``; returns them by file name.

    ``projector``: a real projector GGUF to serve (each precision gets a copy
    with a distinct trailing byte, so the files differ); default: a header-only
    clip GGUF from ``write_clip_header``.
    """
    from tests.support.ggufmeta import Shape, write_gguf

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, StubFile] = {}
    for i, quant in enumerate(VISION_QUANTS):
        name = f"Tiny-{quant}.gguf"
        path = write_gguf(folder / name, Shape(n_layers=2 + i))
        out[name] = stub.add_file(repo, name, path)
    for i, precision in enumerate(VISION_PROJECTORS):
        name = f"mmproj-Tiny-{precision}.gguf"
        if projector is not None:
            # GGUF readers ignore bytes past the last tensor's data.
            data = projector.read_bytes() + bytes([i])
        else:
            data = write_clip_header(folder / name, seed=i).read_bytes()
        out[name] = stub.add_file(repo, name, data)
    return out


def write_clip_header(path: Path, *, seed: int = 0) -> Path:
    """A small GGUF that reads as a clip projector (``general.architecture = clip``)
    with one tensor; enough for the store and ``show``, not for loading in libmtmd."""
    import numpy as np
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "clip")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_uint32("clip.vision.image_size", 28)
    w.add_uint32("clip.vision.patch_size", 14)
    w.add_tensor("mm.0.weight", np.full((4, 4), seed, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
