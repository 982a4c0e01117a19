"""The one exception tree of localllm, mapped to HTTP, OpenAI and exit codes at each edge.

::

    LocalLLMError (500)
    ├── InvalidRequest (400)
    │   ├── InvalidName (400)
    │   ├── InvalidDigest (400)
    │   ├── DigestMismatch (400)
    │   └── InvalidModelFile (400)     malformed / truncated / hostile GGUF
    ├── Forbidden (403)
    ├── NotFound (404)
    │   ├── ModelNotFound (404)
    │   └── BlobNotFound (404)
    ├── PullError (500, or the status the Hub answered)
    ├── ServerBusy (503)
    ├── ShuttingDown (503)
    ├── NativeUnavailable (500)
    ├── ModelLoadError (500)
    ├── RunnerCrashed (500)
    └── ToolServerError (424)    an MCP server that would not start, list or answer

Routes never map errors by matching message text: they read ``status``.
"""

from __future__ import annotations


class LocalLLMError(Exception):
    """Base of every error localllm raises on purpose."""

    status: int = 500  # the HTTP status; each API's error type follows from it

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message


class InvalidRequest(LocalLLMError):
    status = 400


class InvalidName(InvalidRequest):
    pass


class InvalidDigest(InvalidRequest):
    pass


class DigestMismatch(InvalidRequest):
    pass


class InvalidModelFile(InvalidRequest):
    pass


class Forbidden(LocalLLMError):
    status = 403


class NotFound(LocalLLMError):
    status = 404


class ModelNotFound(NotFound):
    pass


class BlobNotFound(NotFound):
    pass


class PullError(LocalLLMError):
    pass


class ServerBusy(LocalLLMError):
    status = 503


class ShuttingDown(LocalLLMError):
    status = 503


class NativeUnavailable(LocalLLMError):
    pass


class ModelLoadError(LocalLLMError):
    pass


class RunnerCrashed(LocalLLMError):
    pass


class ToolServerError(LocalLLMError):
    """An MCP server failed: it did not start, list its tools or answer (OpenAI's 424)."""

    status = 424


def exit_code(exc: BaseException) -> int:
    """CLI exit status for an error: 1 for ours, 2 for usage, 130 for Ctrl-C."""
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1
