"""Anthropic's Messages API shapes as ``TypedDict``s: the request body as read, the
``message`` object, the stream's events and the error body as written.

Field names are exactly Anthropic's.  A request body is whatever the client
sent: its types say what a field should hold, and the converters
(``request.py``, ``thinking.py``) still check every value, a wrong one being a
400 that names the field, so every key of a request type is optional.
"""

from __future__ import annotations

from typing import Literal, TypedDict

from localllm.api.wire import JSONObject

# -- the request, as read ------------------------------------------------------------------


class ImageSource(TypedDict, total=False):
    type: str  # base64 (url and file sources are refused)
    media_type: str
    data: str


class ContentBlock(TypedDict, total=False):
    """A block of a message or of ``system``; which keys it has depends on ``type``."""

    type: str  # text | image | tool_use | tool_result | thinking | redacted_thinking
    text: str  # text
    source: ImageSource  # image
    id: str  # tool_use
    name: str  # tool_use
    input: JSONObject  # tool_use
    tool_use_id: str  # tool_result
    content: str | list[ContentBlock]  # tool_result
    is_error: bool  # tool_result
    thinking: str  # thinking
    signature: str  # thinking
    cache_control: JSONObject  # ignored: prefix reuse is automatic


class Message(TypedDict, total=False):
    role: str  # user | assistant (| system, as Claude Code sends one mid-conversation)
    content: str | list[ContentBlock]


class ToolDef(TypedDict, total=False):
    type: str  # absent or "custom"; anything else is a server tool
    name: str
    description: str
    input_schema: JSONObject


class ToolChoice(TypedDict, total=False):
    type: str  # auto | any | tool | none
    name: str  # type "tool"
    disable_parallel_tool_use: bool


class ThinkingConfig(TypedDict, total=False):
    type: str  # enabled | adaptive | disabled
    budget_tokens: int
    display: str  # summarized | omitted


class OutputFormat(TypedDict, total=False):
    type: str  # json_schema
    schema: JSONObject


class OutputConfig(TypedDict, total=False):
    effort: str  # low | medium | high | xhigh | max
    format: OutputFormat


class ThinkingTurns(TypedDict, total=False):
    type: str  # thinking_turns
    value: int


class ContextEdit(TypedDict, total=False):
    type: str  # clear_thinking_* | clear_tool_uses_*
    keep: Literal["all"] | ThinkingTurns


class ContextManagement(TypedDict, total=False):
    edits: list[ContextEdit]


class MessagesRequest(TypedDict, total=False):
    """A ``/v1/messages`` (or ``count_tokens``) body."""

    model: str
    messages: list[Message]
    system: str | list[ContentBlock]
    max_tokens: int
    stream: bool
    temperature: float
    top_p: float
    top_k: int
    stop_sequences: list[str]
    tools: list[ToolDef]
    tool_choice: ToolChoice
    thinking: ThinkingConfig
    output_config: OutputConfig
    context_management: ContextManagement
    mcp_servers: list[JSONObject]  # dropped: the MCP connector runs on Anthropic's side


# -- the answer, as written ----------------------------------------------------------------


class Usage(TypedDict):
    input_tokens: int  # the prompt less what the cache served
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class StartUsage(TypedDict):
    """``message_start``'s usage: zeros, the real counts come with ``message_delta``."""

    input_tokens: int
    output_tokens: int


class ThinkingBlock(TypedDict):
    type: Literal["thinking"]
    thinking: str
    signature: str


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: JSONObject


Block = ThinkingBlock | TextBlock | ToolUseBlock


class MessageObject(TypedDict):
    """The ``message``: the whole answer, or (empty) in ``message_start``."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[Block]
    stop_reason: str | None  # end_turn | max_tokens | stop_sequence | tool_use
    stop_sequence: str | None
    usage: Usage | StartUsage


class ThinkingDelta(TypedDict):
    type: Literal["thinking_delta"]
    thinking: str


class TextDelta(TypedDict):
    type: Literal["text_delta"]
    text: str


class InputJSONDelta(TypedDict):
    type: Literal["input_json_delta"]
    partial_json: str


class MessageStart(TypedDict):
    type: Literal["message_start"]
    message: MessageObject


class Ping(TypedDict):
    type: Literal["ping"]


class BlockStart(TypedDict):
    type: Literal["content_block_start"]
    index: int
    content_block: Block


class BlockDelta(TypedDict):
    type: Literal["content_block_delta"]
    index: int
    delta: ThinkingDelta | TextDelta | InputJSONDelta


class BlockStop(TypedDict):
    type: Literal["content_block_stop"]
    index: int


class StopDelta(TypedDict):
    stop_reason: str
    stop_sequence: str | None


class MessageDelta(TypedDict):
    type: Literal["message_delta"]
    delta: StopDelta
    usage: Usage


class MessageStop(TypedDict):
    type: Literal["message_stop"]


class ErrorDetail(TypedDict):
    type: str  # invalid_request_error, overloaded_error...
    message: str


class ErrorBody(TypedDict):
    """Anthropic's error shape: a response body, or a stream's ``error`` event."""

    type: Literal["error"]
    error: ErrorDetail


StreamEvent = (
    MessageStart
    | Ping
    | BlockStart
    | BlockDelta
    | BlockStop
    | MessageDelta
    | MessageStop
    | ErrorBody
)
