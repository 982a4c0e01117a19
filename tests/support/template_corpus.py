"""The real chat templates llama.cpp tests with, read from the pinned llama-cpp-python sdist.

The sdist is the one the RPC plugin build uses (``backends.source``: cached,
downloaded with pip when missing, hash-checked); its
``vendor/llama.cpp/models/templates/*.jinja`` are read straight from the tarball
at test time, never copied into this repository.  Also here: the conversations
each template is rendered with, and the reference renderer (transformers' own).
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from localllm.backends.source import core_version, fetch_sdist

TEMPLATES_DIR = "/vendor/llama.cpp/models/templates/"


@lru_cache(maxsize=1)
def corpus() -> dict[str, str]:
    """Template file name -> template text, for every ``*.jinja`` in the sdist.

    Walking the 77 MB tarball takes 0.7 s, and every xdist worker collects these
    tests: the texts are kept beside the (hash-checked) tarball, for as long as
    its size and mtime are the same.
    """
    tarball = fetch_sdist(core_version())
    stat = tarball.stat()
    stamp = [stat.st_size, stat.st_mtime_ns]
    kept = tarball.with_name(tarball.name + ".templates.json")
    try:
        doc = json.loads(kept.read_text())
        if doc["stamp"] == stamp:
            return dict(doc["templates"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    out = _read_templates(tarball)
    tmp = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"stamp": stamp, "templates": out}))
    os.replace(tmp, kept)
    return out


def _read_templates(tarball: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar:
            if member.isfile() and TEMPLATES_DIR in member.name and member.name.endswith(".jinja"):
                handle = tar.extractfile(member)
                assert handle is not None
                out[member.name.rsplit("/", 1)[1]] = handle.read().decode("utf-8")
    return dict(sorted(out.items()))


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city"],
        },
    },
}
# Mistral's templates insist on 9-character alphanumeric ids.
CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}},
}

CONVERSATIONS: dict[str, dict[str, Any]] = {
    "system+user": {
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Why is the sky blue?"},
        ]
    },
    "multi-turn": {
        "messages": [
            {"role": "user", "content": "Hello!"},
            {"role": "assistant", "content": "Hi, how can I help?"},
            {"role": "user", "content": "Name a <colour> & a number."},
        ]
    },
    "tool-call+result": {
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "system", "content": "Use tools when they help."},
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {
                "role": "tool",
                "content": '{"temperature": 18}',
                "tool_call_id": "call12345",
                "name": "get_weather",
                "tool_name": "get_weather",
            },
        ],
    },
    "tools-offered": {
        "tools": [WEATHER_TOOL],
        "messages": [{"role": "user", "content": "Weather in Tokyo?"}],
    },
    "reasoning-in-history": {
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4", "thinking": "Two and two make four."},
            {"role": "user", "content": "And 3+3?"},
        ]
    },
}

BOS, EOS = "<s>", "</s>"


def reference(template: str, case: dict[str, Any], *, iterables: bool = False) -> str:
    """transformers' rendering (what ``apply_chat_template`` produces as text).

    ``iterables``: its ``tojson`` writes a generator as a list, as llama.cpp's renderer
    does (``json.dumps`` refuses one, so a template written for llama.cpp, such as its
    ``tools | map(...) | tojson``, fails in transformers); nothing else changes."""
    import transformers.utils.chat_template_utils as ctu

    real = ctu.json
    if iterables:

        def dumps(x: Any, **kw: Any) -> str:
            return json.dumps(x, default=_listed, **kw)

        ctu.json = SimpleNamespace(dumps=dumps, loads=json.loads)  # type: ignore[assignment]
    try:
        rendered, _ = ctu.render_jinja_template(
            conversations=[case["messages"]],
            tools=case.get("tools"),
            chat_template=template,
            add_generation_prompt=True,
            bos_token=BOS,
            eos_token=EOS,
        )
    finally:
        ctu.json = real
    return str(rendered[0])


def _listed(x: Any) -> Any:
    if isinstance(x, Iterator):
        return list(x)
    raise TypeError(f"Object of type {type(x).__name__} is not JSON serializable")
