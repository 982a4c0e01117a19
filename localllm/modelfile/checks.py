"""Validation shared by the Modelfile parser's callers and ``/api/create``.

Parameter names and types come from ``api.options`` (the one list); templates
are test-rendered with a small conversation so that a broken or hostile
template is refused when the model is created, not on its first chat.
"""

from __future__ import annotations

from typing import Any

from localllm.api.options import OPTION_TYPES, merge_options
from localllm.api.wire import JSONObject
from localllm.errors import InvalidRequest
from localllm.store.blobs import MAX_TEXT_LAYER

ROLES = ("system", "user", "assistant", "tool")


def check_text_sizes(
    *, template: str | None, system: str | None, licenses: list[str], parameters: Any, messages: Any
) -> None:
    """400 for a text layer larger than the store will read back (``MAX_TEXT_LAYER``):
    refused at create, never stored as a model that show and generate then reject."""
    import json

    texts: list[tuple[str, str | None]] = [("TEMPLATE", template), ("SYSTEM", system)]
    texts += [("LICENSE", text) for text in licenses]
    for what, text in texts:
        # Four UTF-8 bytes per character at most: most texts skip the encode.
        if (
            text is not None
            and len(text) * 4 > MAX_TEXT_LAYER
            and len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_LAYER
        ):
            raise InvalidRequest(_too_big(what))
    for what, value in (("parameters", parameters), ("messages", messages)):
        if value is not None and len(json.dumps(value, default=str)) > MAX_TEXT_LAYER:
            raise InvalidRequest(_too_big(what))


def _too_big(what: str) -> str:
    return f"{what} is too large: a text layer may hold at most {MAX_TEXT_LAYER >> 20} MiB"


def check_parameters(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """Typed copies of ``params``; 400 for an unknown name or a value of the wrong type."""
    if params is None:
        return None
    if not isinstance(params, dict):
        raise InvalidRequest("parameters must be an object")
    out: dict[str, Any] = {}
    for key, value in params.items():
        if key not in OPTION_TYPES:
            raise InvalidRequest(f'unknown parameter "{key}"')
        if key == "stop" and isinstance(value, list):
            # Stored text layers hold every value as text; lists must hold strings.
            if not all(isinstance(v, str) for v in value):
                raise InvalidRequest('parameter "stop" must be a list of strings')
        try:
            out[key] = merge_options({key: value}, None)[key]
        except InvalidRequest as exc:
            raise InvalidRequest(f'invalid value for parameter "{key}": {exc.message}') from None
    return out


def check_messages(messages: Any) -> list[dict[str, str]] | None:
    if messages is None:
        return None
    if not isinstance(messages, list):
        raise InvalidRequest("messages must be a list")
    out = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise InvalidRequest(f"messages[{i}] must be an object")
        role = msg.get("role")
        content = msg.get("content", "")
        if role not in ROLES:
            raise InvalidRequest(
                f'messages[{i}]: role must be one of {", ".join(ROLES)}, got "{role}"'
            )
        if not isinstance(content, str):
            raise InvalidRequest(f"messages[{i}]: content must be a string")
        out.append({"role": role, "content": content})
    return out


def check_template(template: str, messages: list[dict[str, str]], system: str | None) -> None:
    """Render ``template`` once for a sample chat; 400 with the reason if that fails."""
    if not template.strip():
        return
    from localllm.template.select import render_prompt

    sample: list[JSONObject] = [{"role": "system", "content": system}] if system else []
    sample += [{**m} for m in messages]
    sample.append({"role": "user", "content": "Hello"})
    try:
        render_prompt(template, None, sample)
    except InvalidRequest as exc:
        raise InvalidRequest(f"invalid TEMPLATE: {exc.message}") from None
