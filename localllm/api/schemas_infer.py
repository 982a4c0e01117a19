"""Pydantic wire models for the inference endpoints: generate, chat, embed.

Field names follow Ollama's API.  Unknown fields are ignored, as Ollama does;
``options`` stays a plain dict so that its keys are checked (and unknown ones
ignored) in one place, ``localllm.api.options``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictBool


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = ""
    options: dict[str, JsonValue] | None = None
    keep_alive: int | float | str | None = None


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str = "function"
    function: ToolFunction


class ToolCallFunction(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    index: int | None = None


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: str | None = None
    function: ToolCallFunction


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | None = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class _Generation(_Request):
    """What ``/api/generate`` and ``/api/chat`` both take."""

    stream: StrictBool = True
    format: str | dict[str, Any] | None = None  # "json" or a JSON schema
    grammar: str | None = None  # GBNF with a "root" rule (llama-server's field), or format
    think: bool | str | None = None
    truncate: bool | None = None
    shift: bool | None = None  # context shift when generation fills the context (default on)
    logprobs: StrictBool = False
    top_logprobs: int = 0


class GenerateRequest(_Generation):
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: StrictBool = False
    images: list[str] | None = None


class ChatRequest(_Generation):
    messages: list[Message] = Field(default_factory=list)
    tools: list[Tool] | None = None


class EmbedRequest(_Request):
    input: str | list[str] = Field(default_factory=list)
    truncate: StrictBool = True
    dimensions: int | None = None


class EmbeddingsRequest(_Request):
    prompt: str = ""
