"""The daemon's OpenAPI document, served at ``/openapi.json``.

Routes read their JSON bodies themselves (``deps.parse_json``: Ollama's
clients send JSON under any content type), so FastAPI cannot see the request
models.  This module adds them: each body-taking route gets its pydantic
model's JSON schema (or, for the OpenAI and Anthropic routes, which take free-form objects,
a small hand-written schema of the fields that matter).  The document feeds
the API reference and the schemathesis test.
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from localllm.api.wire import JSONObject, JSONValue

# (path, method) -> "module:Model" holding the body's pydantic model.
_MODELS: dict[tuple[str, str], str] = {
    ("/api/generate", "post"): "localllm.api.schemas_infer:GenerateRequest",
    ("/api/chat", "post"): "localllm.api.schemas_infer:ChatRequest",
    ("/api/embed", "post"): "localllm.api.schemas_infer:EmbedRequest",
    ("/api/embeddings", "post"): "localllm.api.schemas_infer:EmbeddingsRequest",
    ("/api/show", "post"): "localllm.api.schemas:ShowRequest",
    ("/api/pull", "post"): "localllm.api.schemas:PullRequest",
    ("/api/delete", "delete"): "localllm.api.schemas:DeleteRequest",
    ("/api/copy", "post"): "localllm.api.schemas:CopyRequest",
    ("/api/create", "post"): "localllm.server.routes_create:CreateRequest",
    ("/api/eval", "post"): "localllm.compat.systemone:SystemOneBody",
    ("/v1/systemone", "post"): "localllm.compat.systemone:SystemOneBody",
    **{
        (path, "post"): "localllm.compat.rerank:RerankBody"
        for path in (
            "/api/rerank",
            "/v1/rerank",
            "/v2/rerank",
            "/rerank",
            "/reranking",
            "/v1/reranking",
        )
    },
}


def _object(required: list[str], **properties: JSONValue) -> JSONObject:
    """A JSON schema for an object with these ``properties``, ``required`` ones first."""
    return {"type": "object", "required": required, "properties": properties}


_STRING: JSONObject = {"type": "string"}
_INTEGER: JSONObject = {"type": "integer"}
_NUMBER: JSONObject = {"type": "number"}
_BOOLEAN: JSONObject = {"type": "boolean"}


def _array(items: JSONValue) -> JSONObject:
    return {"type": "array", "items": items}


def _string_or(other: JSONValue) -> JSONObject:
    return {"oneOf": [_STRING, other]}


_MESSAGE: JSONObject = {
    "type": "object",
    "properties": {
        "role": {"type": "string", "enum": ["system", "user", "assistant", "tool"]},
        "content": _STRING,
    },
    "required": ["role", "content"],
}
_SAMPLING: JSONObject = {
    "model": _STRING,
    "stream": _BOOLEAN,
    "max_tokens": _INTEGER,
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "seed": _INTEGER,
    "stop": _string_or(_array(_STRING)),
}
_EFFORT: JSONObject = {"type": "string", "enum": ["low", "medium", "high"]}
_OPENAI: dict[tuple[str, str], JSONObject] = {
    ("/v1/chat/completions", "post"): _object(
        ["model", "messages"], **_SAMPLING, messages=_array(_MESSAGE)
    ),
    ("/v1/completions", "post"): _object(
        ["model", "prompt"], **_SAMPLING, prompt=_STRING, suffix=_STRING
    ),
    ("/v1/responses", "post"): _object(
        ["model", "input"],
        model=_STRING,
        stream=_BOOLEAN,
        instructions=_STRING,
        max_output_tokens=_INTEGER,
        temperature=_NUMBER,
        top_p=_NUMBER,
        input=_string_or(_array(_MESSAGE)),
        reasoning={"type": "object", "properties": {"effort": _EFFORT}},
    ),
    ("/v1/messages", "post"): _object(
        ["model", "max_tokens", "messages"],
        model=_STRING,
        stream=_BOOLEAN,
        max_tokens=_INTEGER,
        system=_STRING,
        temperature=_NUMBER,
        top_p=_NUMBER,
        top_k=_INTEGER,
        stop_sequences=_array(_STRING),
        messages=_array(_MESSAGE),
    ),
    ("/v1/messages/count_tokens", "post"): _object(
        ["model", "messages"], model=_STRING, system=_STRING, messages=_array(_MESSAGE)
    ),
    ("/v1/embeddings", "post"): _object(
        ["model", "input"],
        model=_STRING,
        dimensions=_INTEGER,
        input=_string_or(_array(_STRING)),
    ),
}


def openapi_builder(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """A replacement for ``app.openapi`` that fills in the request bodies (built once)."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            with warnings.catch_warnings():
                # GET+HEAD routes share one function, so FastAPI's ids collide; they
                # are replaced below by ids made of method and path.
                warnings.simplefilter("ignore", UserWarning)
                doc = get_openapi(
                    title=app.title,
                    version=app.version,
                    routes=app.routes,
                    description="Ollama- and OpenAI-compatible local LLM daemon.",
                )
            add_bodies(doc)
            for path, ops in doc.get("paths", {}).items():
                for method, op in ops.items():
                    op["operationId"] = method + re.sub(r"[^A-Za-z0-9]+", "_", path).rstrip("_")
            app.openapi_schema = doc
        return app.openapi_schema

    return build


def add_bodies(doc: dict[str, Any]) -> None:
    components = doc.setdefault("components", {}).setdefault("schemas", {})
    for (path, method), ref in _MODELS.items():
        op = doc.get("paths", {}).get(path, {}).get(method)
        model = _load(ref)
        if op is None or model is None:
            continue
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
        _set_body(op, "application/json", {"$ref": f"#/components/schemas/{model.__name__}"})
    for (path, method), schema in _OPENAI.items():
        op = doc.get("paths", {}).get(path, {}).get(method)
        if op is not None:
            _set_body(op, "application/json", schema)
    for method in ("post",):
        op = doc.get("paths", {}).get("/api/blobs/{digest}", {}).get(method)
        if op is not None:
            _set_body(op, "application/octet-stream", {"type": "string", "format": "binary"})


def _set_body(op: dict[str, object], media: str, schema: JSONObject) -> None:
    op["requestBody"] = {"required": True, "content": {media: {"schema": schema}}}


def _load(ref: str) -> type[BaseModel] | None:
    module_name, _, attr = ref.partition(":")
    try:
        model = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError):
        return None  # a route module this build does not have
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None
