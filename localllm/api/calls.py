"""What each call of the daemon's client sends: method, route and JSON body.

Written once here for both ``api/client.py`` classes (``Client`` and
``AsyncClient`` only add how the answer is awaited and read), with the
pieces an upload is sent in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO

from localllm.api.bodies import ChatBody, PullBody, ShowBody

Body = Mapping[str, Any]  # a request body, as given: the call sends it as JSON
Call = tuple[str, str, Any]  # HTTP method, path, JSON body (None: no body)
Sent = Callable[[int], None]  # an upload's progress: bytes sent so far
_CHUNK = 1 << 20


def file_pieces(fh: BinaryIO, progress: Sent | None) -> Iterator[bytes]:
    """The file in 1 MiB pieces; ``progress(bytes sent so far)`` once each piece is taken."""
    sent = 0
    while chunk := fh.read(_CHUNK):
        yield chunk
        sent += len(chunk)
        if progress is not None:
            progress(sent)


class Calls:
    """Method, route and body of each call; the streamed ones ask for ``"stream": true``."""

    version: Call = ("GET", "/api/version", None)
    tags: Call = ("GET", "/api/tags", None)
    ps: Call = ("GET", "/api/ps", None)

    @staticmethod
    def show(
        model: str,
        verbose: bool,
        fit_contexts: Sequence[int] | None = None,
        num_parallel: int | None = None,
    ) -> Call:
        body: ShowBody = {"model": model, "verbose": verbose}
        if fit_contexts:  # ours: the daemon's planner judges these contexts
            body["fit_contexts"] = list(fit_contexts)
            if num_parallel is not None:
                body["options"] = {"num_parallel": num_parallel}
        return "POST", "/api/show", body

    @staticmethod
    def copy(source: str, destination: str) -> Call:
        return "POST", "/api/copy", {"source": source, "destination": destination}

    @staticmethod
    def delete(model: str) -> Call:
        return "DELETE", "/api/delete", {"model": model}

    @staticmethod
    def embed(body: Body) -> Call:
        return "POST", "/api/embed", body

    @staticmethod
    def rerank(body: Body) -> Call:
        return "POST", "/api/rerank", body

    @staticmethod
    def load(model: str, keep_alive: str | float | None) -> Call:
        # As Ollama: a chat without messages loads the model and answers at once.
        body: ChatBody = {"model": model, "messages": [], "stream": False}
        if keep_alive is not None:
            body["keep_alive"] = keep_alive
        return "POST", "/api/chat", body

    @staticmethod
    def unload(model: str) -> Call:
        # As Ollama's ``stop``: a request with keep_alive 0 unloads the model now.
        return "POST", "/api/generate", {"model": model, "keep_alive": 0, "stream": False}

    @staticmethod
    def search(query: str, limit: int) -> Call:
        from urllib.parse import urlencode

        return "GET", "/api/search?" + urlencode({"q": query, "limit": limit}), None

    @staticmethod
    def blob(digest: str) -> str:
        return f"/api/blobs/{digest}"

    # -- the streamed calls: each client's ``_stream`` reads their NDJSON lines
    @staticmethod
    def pull(
        model: str,
        projector: str | None,
        force: bool | None,
        dry_run: bool,
        max_rate: int | None = None,
    ) -> Call:
        body: PullBody = {"model": model}
        if projector:
            body["projector"] = projector
        if force is not None:
            body["force"] = force
        if dry_run:
            body["dry_run"] = True
        if max_rate:
            body["max_rate"] = max_rate
        return Calls.streamed("/api/pull", body)

    @staticmethod
    def streamed(path: str, body: Body) -> Call:
        return "POST", path, {**body, "stream": True}
