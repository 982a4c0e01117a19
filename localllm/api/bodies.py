"""The native request bodies as written by code (``TypedDict``s): ``/api/chat``,
``/api/generate`` and ``/api/embed`` as the ``compat`` converters and the clients
(CLI, TUI) build them, and the ``/api/show`` and ``/api/pull`` bodies of ``calls.py``.

The daemon reads these bodies with the pydantic models of ``api/schemas_infer.py``,
which check them; these types only name the keys for mypy where a body is built
as a dict, so a converter that misspells a field fails the type check, not a
request.  Field names are Ollama's; ``truncate`` is ours.  Like ``wire.py``
(whose shapes it shares) this imports nothing else at run time.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict

from localllm.api.wire import JSONObject, JSONValue, ToolCall

# Sampling options by name (``num_ctx``, ``temperature``, ``stop``...): a client's own
# ``options`` object passes through, so any option the daemon knows may be there.
Options: TypeAlias = "dict[str, JSONValue]"


class ChatMessage(TypedDict):
    """One message of an ``/api/chat`` request."""

    role: str  # system | user | assistant | tool
    content: str
    images: NotRequired[list[str]]  # base64, or a data: or http(s) URL the daemon reads
    thinking: NotRequired[str]  # an assistant turn's reasoning
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]  # a tool message: the call it answers
    tool_name: NotRequired[str]  # a tool message: the tool that was called


class FunctionSpec(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: JSONObject  # a JSON schema


class Tool(TypedDict):
    """One of the tools an ``/api/chat`` request offers the model."""

    type: Literal["function"]
    function: FunctionSpec


class ChatBody(TypedDict):
    """An ``/api/chat`` request."""

    model: str
    messages: list[ChatMessage]
    stream: NotRequired[bool]  # Ollama's default: true
    options: NotRequired[Options]
    format: NotRequired[str | JSONObject]  # "json" or a JSON schema
    grammar: NotRequired[str]  # or raw GBNF (llama-server's field)
    tools: NotRequired[list[Tool]]
    think: NotRequired[bool | str]  # on, off, or a level (api/thinkbudget.py)
    logprobs: NotRequired[bool]
    top_logprobs: NotRequired[int]
    keep_alive: NotRequired[JSONValue]  # a duration: seconds or "5m" (the daemon checks it)
    truncate: NotRequired[bool]  # ours: False makes a prompt over the context a 400


class GenerateBody(TypedDict):
    """An ``/api/generate`` request."""

    model: str
    prompt: str
    stream: NotRequired[bool]
    options: NotRequired[Options]
    suffix: NotRequired[str]
    grammar: NotRequired[str]  # raw GBNF (llama-server's field)
    logprobs: NotRequired[bool]
    top_logprobs: NotRequired[int]


class EmbedBody(TypedDict):
    """An ``/api/embed`` request."""

    model: str
    input: list[str]
    dimensions: NotRequired[int]


class ShowBody(TypedDict):
    """An ``/api/show`` request."""

    model: str
    verbose: bool
    fit_contexts: NotRequired[list[int]]  # ours: contexts the daemon's planner judges
    options: NotRequired[Options]  # num_parallel, for those verdicts


class PullBody(TypedDict):
    """An ``/api/pull`` request."""

    model: str
    projector: NotRequired[str]  # ours: a vision projector file or precision, or "none"
    force: NotRequired[bool]  # ours: pull a model too big for the daemon's machine
    dry_run: NotRequired[bool]  # ours: read the header and plan, download nothing
    max_rate: NotRequired[int]  # ours: bytes per second
