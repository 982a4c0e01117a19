"""Pydantic wire models for the model-management requests (``/api/show``, ``/api/pull``, ...).

Field names follow Ollama's API exactly.  Requests ignore unknown fields, as
Ollama does; the deprecated ``name`` field is accepted wherever ``model`` is.
The CLI's client reads plain JSON (importing pydantic costs start-up time);
these models validate what the server receives.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from localllm.config_values import parse_size


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _ModelRequest(_Request):
    """A request naming one model by ``model`` (or the deprecated ``name``)."""

    model: str = ""
    name: str = ""  # deprecated alias of model, still sent by older clients

    @model_validator(mode="after")
    def _use_name(self) -> _ModelRequest:
        if not self.model and self.name:
            self.model = self.name
        return self


class ShowRequest(_ModelRequest):
    verbose: bool = False
    system: str | None = None
    options: dict[str, JsonValue] | None = None
    # Not in Ollama: contexts to judge the model's fit at, on the daemon's machine
    # (``options.num_parallel`` sets the slots, else the model's own); the answer's ``fit``.
    fit_contexts: list[Annotated[int, Field(ge=1, le=10_000_000)]] | None = Field(
        default=None, max_length=16
    )


class PullRequest(_ModelRequest):
    insecure: bool = False
    stream: bool = True
    # Not in Ollama: the vision projector file (or precision) to take, or "none".
    projector: str | None = None
    # Not in Ollama: read the header and plan the load without downloading anything.
    dry_run: bool = False
    # Not in Ollama: a model too big for this machine is refused before downloading
    # when this is false (the CLI sends it), pulled anyway when true, and pulled with
    # a warning in the progress when absent (Ollama's clients never send it).
    force: bool | None = None
    # Not in Ollama: this pull's bandwidth cap in bytes per second, a number or a size
    # ("5M" = 5 MiB/s); 0 or absent: only LOCALLLM_MAX_DOWNLOAD_RATE, the daemon's cap.
    max_rate: Annotated[
        int | None,
        Field(ge=0),
        WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]}),
    ] = None

    @field_validator("max_rate", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value


class DeleteRequest(_ModelRequest):
    pass


class CopyRequest(_Request):
    source: str = ""
    destination: str = ""
