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
* ``GET|HEAD /cdn/{sha256}``: the bytes, ``Range`` -> ``206``.
* Errors like the Hub: ``404`` with ``X-Error-Code: RepoNotFound``,
  ``RevisionNotFound`` or ``EntryNotFound``; private repos answer ``401``
  without the right ``Authorization: Bearer``.

Faults, per file path: ``cut_once[path] = n`` closes the connection after n
body bytes the next time it is served; ``corrupt.add(path)`` flips a byte of
every copy served; ``delay_s`` sleeps per 64 KiB chunk.  ``requests`` logs
every request (method, path, Range and Authorization headers); ``api_status``
makes every ``/api`` call fail with that status.

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
from urllib.parse import unquote, urlsplit

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
    _server: ThreadingHTTPServer | None = None

    # -- content -----------------------------------------------------------------
    def add_file(self, repo: str, path: str, data: bytes | Path, *, lfs: bool | None = None
                 ) -> StubFile:
        self.root.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            disk = self.root / hashlib.sha256(f"{repo}/{path}".encode()).hexdigest()
            disk.write_bytes(data)
        else:
            disk = data
        h = hashlib.sha256()
        with open(disk, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        size = disk.stat().st_size
        is_lfs = path.endswith(".gguf") if lfs is None else lfs
        oid = hashlib.sha1(f"blob {size}\0{path}".encode()).hexdigest()
        f = StubFile(path, disk, size, h.hexdigest(), oid, is_lfs)
        self.repos.setdefault(repo, {})[path] = f
        return f

    def add_repo(self, repo: str) -> None:
        self.repos.setdefault(repo, {})

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

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    hub: HubStub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    # -- helpers -------------------------------------------------------------------
    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              *, head: bool = False) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, head: bool) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"X-Error-Code": code, "X-Error-Message": message,
                                  "Content-Type": "application/json"}, head=head)

    def _repo(self, repo: str, head: bool) -> dict[str, StubFile] | None:
        files = self.hub.repos.get(repo)
        need = self.hub.private.get(repo)
        if files is None or (need and self.headers.get("Authorization") != f"Bearer {need}"):
            self._error(401 if files is not None else 404, "RepoNotFound",
                        "Repository not found", head)
            return None
        return files

    def _route(self, head: bool) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        self.hub.requests.append(Request(self.command, path, self.headers.get("Range"),
                                         self.headers.get("Authorization")))
        segs = path.strip("/").split("/")
        if segs[0] == "api" and self.hub.api_status is not None:
            self._send(self.hub.api_status, b"Internal Error", head=head)
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
                self._json([_tree_entry(f) for f in files.values()
                            if not prefix or f.path.startswith(prefix + "/")], head)
            else:
                self._json({"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                            "siblings": [{"rfilename": f.path} for f in files.values()]}, head)
        elif len(segs) >= 5 and segs[2] == "resolve":
            self._resolve("/".join(segs[:2]), segs[3], "/".join(segs[4:]), head)
        elif segs[0] == "cdn" and len(segs) == 2:
            self._cdn(segs[1], head)
        else:
            self._error(404, "NotFound", "not found", head)

    def _json(self, value: Any, head: bool) -> None:
        self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"},
                   head=head)

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
            self._send(302, b"", {**common, "Location": f"{host}/cdn/{f.sha256}",
                                  "X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size),
                                  "ETag": f'"{f.git_oid}"'}, head=head)
        else:
            self._send(200, f.disk.read_bytes(), {**common, "ETag": f'"{f.git_oid}"'}, head=head)

    def _cdn(self, sha: str, head: bool) -> None:
        f = next((f for files in self.hub.repos.values() for f in files.values()
                  if f.sha256 == sha), None)
        if f is None:
            self._send(404, b"NoSuchKey", head=head)
            return
        start, end = 0, f.size - 1
        status = 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a) if a else 0
            end = min(int(b), f.size - 1) if b else f.size - 1
            if start >= f.size:
                self._send(416, b"", {"Content-Range": f"bytes */{f.size}"}, head=head)
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("ETag", f'"{f.sha256}"')
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
        self.end_headers()
        if head:
            return
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
                        chunk):
                    i = f.size // 2 - start - sent
                    chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1:]
                if cut is not None and sent + len(chunk) >= cut:
                    self.wfile.write(chunk[: cut - sent])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(chunk)
                sent += len(chunk)
                left -= len(chunk)
                if self.hub.delay_s:
                    time.sleep(self.hub.delay_s)


def _tree_entry(f: StubFile) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path}
    if f.lfs:
        entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
    return entry


VISION_QUANTS = ("Q4_K_M", "Q8_0", "BF16")
VISION_PROJECTORS = ("F16", "F32")


def add_vision_repo(stub: HubStub, folder: Path, repo: str, *,
                    projector: Path | None = None) -> dict[str, StubFile]:
    """Serve ``repo`` with ``Tiny-{quant}.gguf`` for ``VISION_QUANTS`` and
    ``mmproj-Tiny-{precision}.gguf`` for ``VISION_PROJECTORS``; returns them by file name.

    ``projector``: a real projector GGUF to serve (each precision gets a copy
    with a distinct trailing byte, so the files differ); default: a header-only
    clip GGUF from ``write_clip_header``.
    """
    from tests.ggufmeta import Shape, write_gguf

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
