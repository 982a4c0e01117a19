"""The one path of a request in a foreign API's shape: read, convert, log, validate, plan.

Every route that takes an OpenAI, Responses or Anthropic body (a generation, a
token count, a rendered template) goes through :func:`plan_request`:

1. the body is read as JSON (``deps.parse_json``); ``object_only`` makes a body
   that is no JSON object pydantic's 400 (the Chat Completions routes' wording),
   else the converter says so in its API's words;
2. the ``compat`` converter turns it into a native body (a worker thread);
3. the fields it ignored are logged once per client, before planning, so a
   request refused later still says what it sent;
4. the native body is validated by the native route's pydantic model and planned
   exactly as ``/api/chat`` or ``/api/generate`` would (a worker thread again).

The converter decides what is checked and in which words, the planner what the
native route would do; only the order and the threads live here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from pydantic import RootModel
from starlette.requests import Request

from localllm.api.bodies import ChatBody, Tool
from localllm.api.schemas_infer import ChatRequest, GenerateRequest
from localllm.api.wire import ChatChunk, Chunk, GenerateChunk
from localllm.compat.openai.request import CompletionConversion
from localllm.errors import InvalidRequest
from localllm.inference.build import chat_plan, generate_plan
from localllm.inference.generation import Generation
from localllm.inference.service import InferenceService
from localllm.inference.tokens import chat_target
from localllm.server.deps import inference_service, offload, parse_json, validate
from localllm.server.requestlog import note_ignored


class Converted(Protocol):
    """What every converter's answer tells the pipeline: the fields it ignored."""

    @property
    def ignored(self) -> list[str]: ...


class ChatConverted(Converted, Protocol):
    """A conversion to an ``/api/chat`` body, with the tools a call must be made to."""

    @property
    def native(self) -> ChatBody: ...

    @property
    def forced_tools(self) -> list[Tool] | None: ...


V = TypeVar("V", bound=Converted)
W = TypeVar("W", bound=ChatConverted)
C = TypeVar("C", bound=Chunk)
AnyBody = RootModel[Any]
ObjectBody = RootModel[dict[str, object]]


async def plan_request(
    request: Request,
    convert: Callable[[Any], V],
    build: Callable[[InferenceService, V], Generation[C]],
    *,
    object_only: bool = False,
) -> tuple[Generation[C], V]:
    """The plan of this request's body and its conversion (see the module docstring)."""
    if object_only:
        body: Any = (await parse_json(request, ObjectBody)).root
    else:
        body = (await parse_json(request, AnyBody)).root
    conv = await offload(request, convert, body)
    note_ignored(request, conv.ignored)
    return await offload(request, build, inference_service(request), conv), conv


def chat(
    svc: InferenceService,
    conv: ChatConverted,
    *,
    report_stop: bool = False,
    load_if_empty: bool = False,
    chats: bool = False,
) -> Generation[ChatChunk]:
    """An ``/api/chat`` body validated and planned as that route would (a worker thread's
    work).

    An empty ``messages`` is a 400, not Ollama's load-only request, unless
    ``load_if_empty``; ``report_stop``: the plan names the stop string that ended the
    reply (Anthropic's ``stop_sequence``); ``chats``: for a count or a rendered
    prompt, the model must chat (an embedding model has no chat prompt).
    """
    if not load_if_empty and not conv.native["messages"]:
        raise InvalidRequest("messages must be a non-empty array")
    req = validate(ChatRequest, conv.native)
    if chats and req.model:
        chat_target(svc.target(req.model), req.model)
    # The planner takes plain dicts (grammar/tools.py reads them as JSON schemas).
    tools = None if conv.forced_tools is None else [dict(t) for t in conv.forced_tools]
    return chat_plan(svc, req, forced_tools=tools, report_stop=report_stop)


def completion(svc: InferenceService, conv: CompletionConversion) -> Generation[GenerateChunk]:
    """An ``/api/generate`` body validated and planned; an empty prompt is a prompt here,
    not Ollama's load request."""
    req = validate(GenerateRequest, conv.native)
    return generate_plan(svc, req, load_if_empty=False)
