"""OpenAI's Responses API shapes as ``TypedDict``s: the request body and its ``input``
items as read, the ``response`` object, its output items and stream events as written.

Field names are exactly OpenAI's.  A request body is whatever the client sent:
its types say what a field should hold, and the converters (``request.py``,
``input.py``) still check every value (a wrong one is a 400 naming the field),
so every key of a request type is optional.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from localllm.api.wire import JSONObject, JSONValue

# -- the request, as read ------------------------------------------------------------------


class InputPart(TypedDict, total=False):
    """A part of a message's content, of a tool output or of a reasoning item."""

    type: str  # input_text | output_text | text | refusal | input_image | summary_text...
    text: str
    refusal: str
    image_url: str  # input_image: a data: URL or bare base64
    file_id: str  # input_image: refused, the daemon stores no files
    detail: str


class InputItem(TypedDict, total=False):
    """One item of ``input``; which keys it has depends on ``type`` (``message`` when
    it has a ``role`` and no type)."""

    type: str  # message | function_call | function_call_output | reasoning | item_reference
    role: str  # message: system | developer | user | assistant
    content: str | list[InputPart]  # message; reasoning (its text parts)
    name: str  # function_call
    call_id: str  # function_call, function_call_output
    arguments: str | JSONObject  # function_call: JSON text
    output: str | list[InputPart]  # function_call_output
    summary: list[InputPart]  # reasoning
    # MCP items sent back (compat/responses/mcp.py): mcp_call, mcp_list_tools,
    # mcp_approval_request and mcp_approval_response.
    id: str
    server_label: str
    error: JSONValue
    approval_request_id: str
    approve: bool


class FunctionTool(TypedDict, total=False):
    """A tool, flat (unlike Chat Completions'); only ``function`` tools reach the model."""

    type: str
    name: str
    description: str
    parameters: JSONObject  # a JSON schema
    strict: bool


class McpToolSpec(TypedDict, total=False):
    """An ``mcp`` tool: a server whose tools the daemon lists and calls itself."""

    type: str  # mcp
    server_label: str
    server_url: str
    server_description: str
    headers: dict[str, str]  # never echoed: they may hold credentials
    allowed_tools: JSONValue  # names, or {tool_names}
    require_approval: JSONValue  # always | never | {always, never}


class FunctionChoice(TypedDict, total=False):
    type: str  # function
    name: str


class Reasoning(TypedDict, total=False):
    effort: str | None  # none | minimal | low | medium | high | xhigh
    summary: str | None


class TextFormat(TypedDict, total=False):
    type: str  # text | json_object | json_schema
    name: str
    schema: JSONObject
    strict: bool


class TextConfig(TypedDict, total=False):
    format: TextFormat
    verbosity: str


class ConversationRef(TypedDict):
    id: str


class ResponsesRequest(TypedDict, total=False):
    """A ``/v1/responses`` (or ``/v1/responses/input_tokens``) body."""

    model: str
    input: str | list[InputItem]
    instructions: str
    stream: bool
    temperature: float
    top_p: float
    max_output_tokens: int
    tools: list[FunctionTool]
    tool_choice: str | FunctionChoice  # none | auto | required | a named function
    parallel_tool_calls: bool
    reasoning: Reasoning
    text: TextConfig
    truncation: str  # auto | disabled
    metadata: dict[str, str]
    options: JSONObject  # ours: native options, as on /v1/chat/completions
    background: bool  # refused when true
    store: bool  # keep the response (the default), for GET and previous_response_id
    previous_response_id: str  # continue a stored response
    conversation: str | ConversationRef  # respond within a conversation, and add to it
    prompt: JSONValue  # refused: no stored prompts


# -- the answer, as written ----------------------------------------------------------------


class Echo(TypedDict, total=False):
    """The request's fields a ``response`` repeats, as the request resolved them."""

    instructions: str | None
    max_output_tokens: int | None
    temperature: JSONValue
    top_p: JSONValue
    tools: list[FunctionTool | McpToolSpec]
    tool_choice: str | FunctionChoice
    parallel_tool_calls: bool
    reasoning: Reasoning
    text: TextConfig
    truncation: str
    metadata: dict[str, str]
    store: bool
    previous_response_id: str | None
    conversation: ConversationRef | None


class OutputText(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[JSONValue]  # none here: the model cites nothing
    logprobs: list[JSONValue]


class SummaryText(TypedDict):
    type: Literal["summary_text"]
    text: str


class MessageItem(TypedDict):
    id: str
    type: Literal["message"]
    status: str  # in_progress | completed | incomplete
    role: Literal["assistant"]
    content: list[OutputText]


class ReasoningItem(TypedDict):
    id: str
    type: Literal["reasoning"]
    summary: list[SummaryText]
    status: str


class FunctionCallItem(TypedDict):
    id: str
    type: Literal["function_call"]
    status: str
    call_id: str
    name: str
    arguments: str  # JSON text


class McpListedTool(TypedDict):
    name: str
    description: str | None
    input_schema: JSONObject
    annotations: JSONObject | None


class McpListToolsItem(TypedDict):
    id: str
    type: Literal["mcp_list_tools"]
    server_label: str
    tools: list[McpListedTool]
    error: str | None


class McpCallError(TypedDict):
    """OpenAI's ``mcp_protocol_error`` (code, message) or ``mcp_tool_execution_error``."""

    type: str
    code: NotRequired[int]
    message: NotRequired[str]
    content: NotRequired[JSONValue]


class McpCallItem(TypedDict):
    id: str
    type: Literal["mcp_call"]
    status: str  # in_progress | completed | failed
    server_label: str
    name: str
    arguments: str  # JSON text
    output: str | None
    error: McpCallError | None
    approval_request_id: str | None


class McpApprovalRequestItem(TypedDict):
    id: str
    type: Literal["mcp_approval_request"]
    server_label: str
    name: str
    arguments: str  # JSON text


OutputItem = (
    MessageItem
    | ReasoningItem
    | FunctionCallItem
    | McpListToolsItem
    | McpCallItem
    | McpApprovalRequestItem
)


class ResponseUsage(TypedDict):
    input_tokens: int
    input_tokens_details: dict[str, int]  # cached_tokens, cache_write_tokens
    output_tokens: int
    output_tokens_details: dict[str, int]  # reasoning_tokens
    total_tokens: int


class ResponseError(TypedDict):
    code: str
    message: str


class IncompleteDetails(TypedDict):
    reason: str  # max_output_tokens


class ResponseObject(Echo):
    """The ``response``: the whole answer, and the state each lifecycle event carries."""

    id: str
    object: Literal["response"]
    created_at: int
    status: str  # in_progress | completed | incomplete | failed
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    model: str
    output: list[OutputItem]
    usage: ResponseUsage | None
    completed_at: NotRequired[int]


class Where(TypedDict):
    """Which output item (and where in the output) an event is about."""

    item_id: str
    output_index: int


class EventFields(TypedDict, total=False):
    """What an event may carry besides its type and number; which depends on the type."""

    response: ResponseObject  # response.created, .in_progress, .completed...
    output_index: int
    item: OutputItem  # response.output_item.added / .done
    item_id: str
    content_index: int
    summary_index: int
    part: OutputText | SummaryText
    delta: str
    text: str
    logprobs: list[JSONValue]
    name: str
    arguments: str
    code: str  # error
    message: str  # error
    param: None  # error


class Event(EventFields):
    """One stream event."""

    type: str
    sequence_number: int
