"""Pydantic wire models for the model-management endpoints (``/api/tags``, ``/api/show``, ...).

Field names follow Ollama's API exactly.  Requests ignore unknown fields, as
Ollama does; the deprecated ``name`` field is accepted wherever ``model`` is.
The CLI's client reads plain JSON (importing pydantic costs start-up time);
these models are for the server and for callers that want typed values.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


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
    options: dict[str, Any] | None = None


class PullRequest(_ModelRequest):
    insecure: bool = False
    stream: bool = True


class DeleteRequest(_ModelRequest):
    pass


class CopyRequest(_Request):
    source: str = ""
    destination: str = ""


class ModelDetails(BaseModel):
    parent_model: str = ""
    format: str = ""
    family: str = ""
    families: list[str] | None = None
    parameter_size: str = ""
    quantization_level: str = ""


class ListModel(BaseModel):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str  # hex of the manifest's sha256, without the "sha256:" prefix
    details: ModelDetails


class ListResponse(BaseModel):
    models: list[ListModel]


class ShowResponse(BaseModel):
    modelfile: str = ""
    parameters: str = ""
    template: str = ""
    system: str = ""
    license: str = ""
    details: ModelDetails = Field(default_factory=ModelDetails)
    model_info: dict[str, Any] = Field(default_factory=dict)
    capabilities: list[str] = Field(default_factory=list)
    modified_at: str = ""


class ProgressResponse(BaseModel):
    """One line of a pull's NDJSON stream."""

    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None


class VersionResponse(BaseModel):
    version: str


class ErrorResponse(BaseModel):
    error: str
