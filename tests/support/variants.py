"""Tiny-model variants with other chat templates, and a daemon serving them.

The tiny model's greedy text depends only on the last prompt token (see
``tests/support/tinymodel.py``), so a template decides what it says:

* ``tiny-plain``: the prompt is the last message's content, so chat and
  completions give ``GREEDY[content]`` exactly.
* ``tiny-tools``: a Hermes-style template (``<tool_call>``/``<tool_response>``
  markup); the model can't choose to call a tool, but a forced ``tool_choice``
  (a grammar) makes it write one, and the rendered history shows the round trip.
* ``tiny-long``: ``tiny-plain`` trained for the daemon's whole context (``ctx``),
  so that ``LOOP_PROMPT`` keeps a slot busy for seconds.
* ``tiny-think``: the generation prompt opens ``<think>`` (then a space, whose
  successor starts the alphabet) when thinking is on, so the reply is thinking.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, own_daemon, start_daemon
from tests.support.models import add_tiny, import_gguf
from tests.support.tinymodel import CHAT_TEMPLATE, make_tiny_model
from tests.support.visionmodel import make_projector

if TYPE_CHECKING:
    import openai

PLAIN_TEMPLATE = "{{ messages[-1]['content'] }}"
TOOLS_TEMPLATE = (
    "{% if tools %}tools:{% for t in tools %}{{ t.function.name }};{% endfor %}.{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<tool_response>{{ m.content }}</tool_response>."
    "{% elif m.tool_calls %}{{ m.role }}:{% for c in m.tool_calls %}"
    "<tool_call>{{ c.function.name }}({{ c.function.arguments.city }})</tool_call>{% endfor %}."
    "{% else %}{{ m.role }}:{{ m.content }}.{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
THINK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}.{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% if enable_thinking %}<think> {% endif %}"
    "{% endif %}"
)
TEMPLATES = {
    "tiny-plain": PLAIN_TEMPLATE,
    "tiny-tools": TOOLS_TEMPLATE,
    "tiny-think": THINK_TEMPLATE,
}
GREEDY_OPTS = {"temperature": 0, "seed": 1}


def stock_vision(tmp_path: Path) -> None:
    """``tiny`` on ``PLAIN_TEMPLATE``, and the same GGUF with the tiny projector as
    ``tiny-vision``."""
    store = Store(paths.models())
    model = make_tiny_model(tmp_path / "gguf", chat_template=PLAIN_TEMPLATE)
    import_gguf(store, parse_name("tiny"), [model])
    import_gguf(
        store, parse_name("tiny-vision"), [model], projector=make_projector(tmp_path / "mmproj")
    )


def stock(
    tmp_path: Path,
    *,
    ctx: int = 512,
    names: tuple[str, ...] = ("tiny", "tiny-embed", *TEMPLATES),
    templates: dict[str, str] | None = None,
) -> None:
    """The named variants stored; ``templates``: more models, each the tiny model with that
    chat template."""
    for name in names:
        if name == "tiny-embed":
            add_tiny(tmp_path, name, pooling="mean")
        elif name == "tiny-long":
            add_tiny(tmp_path, name, n_ctx_train=ctx, chat_template=PLAIN_TEMPLATE)
        else:
            add_tiny(tmp_path, name, chat_template=TEMPLATES.get(name, CHAT_TEMPLATE))
    for name, template in (templates or {}).items():
        add_tiny(tmp_path, name, chat_template=template)


def settings(parallel: int, ctx: int, env: dict[str, str]) -> dict[str, str]:
    return {"LOCALLLM_NUM_PARALLEL": str(parallel), "LOCALLLM_CONTEXT_LENGTH": str(ctx), **env}


@contextmanager
def serve(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    parallel: int = 4,
    ctx: int = 512,
    names: tuple[str, ...] = ("tiny", "tiny-embed", *TEMPLATES),
    templates: dict[str, str] | None = None,
    **env: str,
) -> Iterator[Daemon]:
    """The real daemon with the named variants stored (and ``env`` set).

    ``templates``: more models, each the tiny model with that chat template."""
    for key, value in settings(parallel, ctx, env).items():
        monkeypatch.setenv(key, value)
    stock(tmp_path, ctx=ctx, names=names, templates=templates)
    with start_daemon(tmp_path) as daemon:
        yield daemon


@contextmanager
def serve_shared(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    parallel: int = 4,
    ctx: int = 512,
    names: tuple[str, ...] = ("tiny", "tiny-embed", *TEMPLATES),
    templates: dict[str, str] | None = None,
    **env: str,
) -> Iterator[Daemon]:
    """``serve`` for a module- or class-scoped fixture: its own home, env restored after.

    For tests that leave the store as they found it; sharing one daemon (and its
    loaded runners) saves a daemon start and a model load per test."""
    with own_daemon(
        tmp_path_factory,
        "shared-daemon",
        lambda tmp: stock(tmp, ctx=ctx, names=names, templates=templates),
        home="localllm-home",
        **settings(parallel, ctx, env),
    ) as daemon:
        yield daemon


def openai_client(d: Daemon) -> openai.OpenAI:
    """The official OpenAI client pointed at ``d``'s ``/v1`` (no retries, no proxy)."""
    import httpx
    import openai

    return d.keep(
        openai.OpenAI(
            base_url=d.url + "/v1",
            api_key="unused",
            max_retries=0,
            http_client=httpx.Client(trust_env=False, timeout=60),
        )
    )
