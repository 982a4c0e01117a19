"""OpenAI's wire shapes (Chat Completions, legacy completions, embeddings, models, errors)
as ``TypedDict``s: the request bodies as read and the objects and chunks as written.

Field names are exactly OpenAI's.  A request body is whatever the client sent:
its types say what the field should hold, and the converters in ``request.py``
and ``messages.py`` still check every value (a wrong one is a 400 naming the
field), so every key of a request type is optional.  Our extensions say so.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from localllm.api.bodies import Tool  # OpenAI's function tools are Ollama's shape
from localllm.api.wire import JSONObject, JSONValue

# -- requests, as read ---------------------------------------------------------------------


class ImageURL(TypedDict, total=False):
    url: str
    detail: str


class ContentPart(TypedDict, total=False):
    """One part of a message's content array (``text``, ``image_url``...)."""

    type: str
    text: str
    image_url: ImageURL | str


class FunctionCall(TypedDict, total=False):
    name: str
    arguments: str | JSONObject  # a JSON string; some clients send the object


class ToolCall(TypedDict, total=False):
    """One entry of an assistant message's ``tool_calls``."""

    id: str
    type: str
    function: FunctionCall


class ChatMessage(TypedDict, total=False):
    role: str  # system | developer | user | assistant | tool
    content: str | list[ContentPart] | None
    name: str
    tool_calls: list[ToolCall]
    tool_call_id: str
    reasoning: str  # an assistant's reasoning (OpenRouter, vLLM, Ollama)
    reasoning_content: str  # the same, as DeepSeek and llama-server name it


class NamedFunction(TypedDict, total=False):
    name: str


class NamedToolChoice(TypedDict, total=False):
    type: str  # "function"
    function: NamedFunction


class JSONSchemaSpec(TypedDict, total=False):
    name: str
    schema: JSONObject
    strict: bool


class ResponseFormat(TypedDict, total=False):
    type: str  # text | json_object | json_schema
    json_schema: JSONSchemaSpec


class StreamOptions(TypedDict, total=False):
    include_usage: bool


class Reasoning(TypedDict, total=False):
    effort: str


class _Sampling(TypedDict, total=False):
    """The fields Chat Completions and legacy completions share."""

    model: str
    stream: bool
    stream_options: StreamOptions
    max_tokens: int
    n: int
    temperature: float
    top_p: float
    stop: str | list[str]
    seed: int
    frequency_penalty: float
    presence_penalty: float
    options: JSONObject  # ours: native options (num_ctx...), under the OpenAI fields
    logit_bias: JSONObject  # token id (or, as llama-server, a text) -> bias, -100..100
    grammar: str  # llama-server's: raw GBNF, in place of response_format
    # llama-server's samplers (top_k, min_p, dry_*, xtc_*, mirostat...) also ride at the
    # top level under their option names (compat/fields.py LLAMA_SAMPLING).


class ChatCompletionRequest(_Sampling, total=False):
    """A ``/v1/chat/completions`` body."""

    messages: list[ChatMessage]
    max_completion_tokens: int
    response_format: ResponseFormat
    tools: list[Tool]
    tool_choice: str | NamedToolChoice  # none | auto | required | a named function
    reasoning_effort: str
    reasoning: Reasoning  # OpenRouter's form of reasoning_effort
    logprobs: bool
    top_logprobs: int
    keep_alive: JSONValue  # ours, as on /api/chat
    reasoning_budget_tokens: int  # llama-server's thinking budget
    thinking_budget_tokens: int  # the same, under its other name
    reasoning_budget_message: str  # llama-server's text for when the budget runs out


class CompletionRequest(_Sampling, total=False):
    """A ``/v1/completions`` body."""

    prompt: str | list[str]
    suffix: str
    echo: bool
    logprobs: int  # alternatives per token, 0 to 20


class EmbeddingRequest(TypedDict, total=False):
    """A ``/v1/embeddings`` body."""

    model: str
    input: str | list[str]
    encoding_format: str  # float | base64
    dimensions: int


# -- answers, as written -------------------------------------------------------------------


class PromptTokensDetails(TypedDict):
    cached_tokens: int


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class FunctionCallOut(TypedDict):
    name: str
    arguments: str  # JSON text


class ToolCallOut(TypedDict):
    index: NotRequired[int]  # in a stream's delta only
    id: str
    type: Literal["function"]
    function: FunctionCallOut


class TopLogprob(TypedDict):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TypedDict):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class Logprobs(TypedDict):
    content: list[TokenLogprob]


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str
    reasoning: NotRequired[str]
    tool_calls: NotRequired[list[ToolCallOut]]


class ChatChoice(TypedDict):
    index: int
    message: AssistantMessage
    logprobs: Logprobs | None
    finish_reason: str  # stop | length | tool_calls


class TextChoice(TypedDict):
    index: int
    text: str
    logprobs: Logprobs | None
    finish_reason: str | None  # None until the choice's last chunk


class Completion(TypedDict):
    """The whole answer of ``/v1/chat/completions`` or ``/v1/completions``."""

    id: str
    object: Literal["chat.completion", "text_completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChoice] | list[TextChoice]
    usage: Usage


class Delta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str
    reasoning: str
    tool_calls: list[ToolCallOut]


class DeltaChoice(TypedDict):
    index: int
    delta: Delta
    logprobs: Logprobs | None
    finish_reason: str | None


class Chunk(TypedDict):
    """One streamed event: a ``chat.completion.chunk`` or a ``text_completion`` chunk."""

    id: str
    object: str
    created: int
    model: str
    system_fingerprint: str
    choices: list[DeltaChoice | TextChoice]  # empty in the usage chunk
    usage: NotRequired[Usage]


class Embedding(TypedDict):
    object: Literal["embedding"]
    embedding: tuple[float, ...] | str  # floats, or base64 little-endian float32
    index: int


class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(TypedDict):
    """``/v1/embeddings``' answer."""

    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class ModelObject(TypedDict):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(TypedDict):
    """``/v1/models``' answer."""

    object: Literal["list"]
    data: list[ModelObject]


class ErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(TypedDict):
    """OpenAI's error shape, in a response body and as a stream's last event."""

    error: ErrorDetail
