"""A local stand-in for Ollama's registry (``registry.ollama.ai``), enough for our pulls.

Serves, on ``127.0.0.1:<free port>`` from a thread, the Docker Registry v2 paths
Ollama's pull uses:

* ``GET /v2/{namespace}/{model}/manifests/{tag}``: the schema-2 manifest (its media type
  as ``Content-Type``); ``404`` with the registry's error JSON for any other name;
* ``GET|HEAD /v2/{namespace}/{model}/blobs/{digest}``: ``307`` to a "CDN" URL on another
  origin (``localhost`` instead of ``127.0.0.1``), as the real registry redirects to
  its storage;
* ``GET|HEAD /cdn/{digest}``: the bytes; ``Range: bytes=a-b`` -> ``206`` with
  ``Content-Range``.

``add_model`` builds a model as ``ollama push`` lays one out: a config blob (Ollama's
fields), the GGUF as the model layer, and template, params, system, license or any
``extra`` layers.  Faults and counters: ``corrupt`` (digests served with one byte
flipped), ``served[digest]`` (body bytes sent), ``requests`` (method, path, Range,
Accept of each request).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.threadserver import serve_in_thread, stop_server

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
IMAGE = "application/vnd.ollama.image."
_CHUNK = 64 << 10


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    accept: str | None


@dataclass
class RegistryStub:
    root: Path
    blobs: dict[str, Path] = field(default_factory=dict)  # digest -> file
    manifests: dict[str, bytes] = field(default_factory=dict)  # "ns/model:tag" -> bytes
    corrupt: set[str] = field(default_factory=set)
    served: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    # -- content -----------------------------------------------------------------
    def blob(self, data: bytes | Path) -> dict[str, Any]:
        """Store ``data`` as a blob; its descriptor (digest, size) for a manifest."""
        self.root.mkdir(parents=True, exist_ok=True)
        raw = data.read_bytes() if isinstance(data, Path) else data
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        path = self.root / digest.replace(":", "-")
        path.write_bytes(raw)
        self.blobs[digest] = path
        return {"digest": digest, "size": len(raw)}

    def add_model(
        self,
        name: str,
        gguf: Path,
        *,
        template: str | None = None,
        params: dict[str, Any] | None = None,
        system: str | None = None,
        license: str | None = None,
        extra: tuple[tuple[str, bytes], ...] = (),
        config: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Serve ``gguf`` and its layers as ``name`` (``model``, ``user/model``, with or
        without ``:tag``); returns the manifest as a dict."""
        ref = name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
        if "/" not in ref:
            ref = f"library/{ref}"
        layers = [{"mediaType": IMAGE + "model", **self.blob(gguf)}]
        texts = [("template", template), ("system", system), ("license", license)]
        for kind, text in texts:
            if text is not None:
                layers.append({"mediaType": IMAGE + kind, **self.blob(text.encode())})
        if params is not None:
            layers.append({"mediaType": IMAGE + "params", **self.blob(json.dumps(params).encode())})
        for media, data in extra:
            layers.append({"mediaType": media, **self.blob(data)})
        cfg = {
            "model_format": "gguf",
            "model_family": "llama",
            "model_families": ["llama"],
            "model_type": "1.2M",
            "file_type": "F32",
            "architecture": "amd64",
            "os": "linux",
            **(config or {}),
        }
        doc = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, **self.blob(json.dumps(cfg).encode())},
            "layers": layers,
        }
        self.manifests[ref] = json.dumps(doc).encode()
        return doc

    def model_digest(self, name: str) -> str:
        ref = name if "/" in name else f"library/{name}"
        ref = ref if ":" in ref.rsplit("/", 1)[-1] else f"{ref}:latest"
        doc = json.loads(self.manifests[ref])
        return str(doc["layers"][0]["digest"])

    def blob_requests(self) -> list[Request]:
        return [r for r in self.requests if "/blobs/" in r.path or r.path.startswith("/cdn/")]

    # -- server ------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> RegistryStub:
        stub = self

        class Handler(_Handler):
            registry = stub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        serve_in_thread(self._server)
        return self

    def stop(self) -> None:
        stop_server(self._server)


class _Handler(BaseHTTPRequestHandler):
    registry: RegistryStub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _send(self, status: int, body: bytes, headers: dict[str, str], head: bool) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _unknown(self, code: str, head: bool) -> None:
        body = json.dumps({"errors": [{"code": code, "message": "not found"}]}).encode()
        self._send(404, body, {"Content-Type": "application/json"}, head)

    def _route(self, head: bool) -> None:
        reg = self.registry
        path = self.path.split("?", 1)[0]
        reg.requests.append(
            Request(self.command, path, self.headers.get("Range"), self.headers.get("Accept"))
        )
        segs = path.strip("/").split("/")
        if len(segs) == 5 and segs[0] == "v2" and segs[3] == "manifests":
            data = reg.manifests.get(f"{segs[1]}/{segs[2]}:{segs[4]}")
            if data is None:
                self._unknown("MANIFEST_UNKNOWN", head)
            else:
                self._send(200, data, {"Content-Type": MANIFEST_TYPE}, head)
        elif len(segs) == 5 and segs[0] == "v2" and segs[3] == "blobs":
            if segs[4] not in reg.blobs:
                self._unknown("BLOB_UNKNOWN", head)
                return
            port = self.server.server_address[1]
            where = {"Location": f"http://localhost:{port}/cdn/{segs[4]}"}
            self._send(307, b"", where, head)
        elif len(segs) == 2 and segs[0] == "cdn" and segs[1] in reg.blobs:
            self._bytes(segs[1], head)
        else:
            self._unknown("NAME_UNKNOWN", head)

    def _bytes(self, digest: str, head: bool) -> None:
        reg = self.registry
        data = reg.blobs[digest].read_bytes()
        if digest in reg.corrupt:
            i = len(data) // 2
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
        size, status, start, end = len(data), 200, 0, len(data) - 1
        headers = {"Accept-Ranges": "bytes", "ETag": f'"{digest}"'}
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a) if a else 0
            end = min(int(b), size - 1) if b else size - 1
            if start >= size:
                self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head)
                return
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        body = data[start : end + 1]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        for at in range(0, len(body), _CHUNK):
            chunk = body[at : at + _CHUNK]
            self.wfile.write(chunk)
            reg.served[digest] = reg.served.get(digest, 0) + len(chunk)
