"""Render Hugging Face chat templates (``tokenizer.chat_template``) in a bounded Jinja sandbox.

A GGUF's template is untrusted input: it runs in Jinja's immutable sandbox (no
attribute access outside what the sandbox allows), with a wall-clock deadline
checked on every attribute, item and call, a budget for ``range`` iterations,
caps on string/list repetition, and a cap on the rendered size.  A template that
loops, recurses or explodes fails with ``TemplateError`` instead of hanging the
daemon.  Variables and helpers follow what Hugging Face's ``apply_chat_template``
provides (trim_blocks, lstrip_blocks, loopcontrols, the ``{% generation %}``
block, ``raise_exception``, ``strftime_now``, its ``tojson``, ``dict`` and a
``namespace`` that refuses private names), so published templates render the
same here.  ``template_variables`` names the globals a template reads, which
is how callers learn what a template supports (think levels, tools).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import TemplateSyntaxError, meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from localllm.errors import InvalidRequest

MAX_OUTPUT_CHARS = 4 << 20
MAX_RANGE_TOTAL = 1_000_000
MAX_REPEAT = 1 << 20
RENDER_SECONDS = 2.0


class TemplateError(InvalidRequest):
    """The chat template could not be rendered (bad syntax, raise_exception, or a limit hit)."""


class _Budget:
    """Per-render limits, installed on the environment for the duration of one render."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.range_left = MAX_RANGE_TOTAL

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateError("chat template took too long to render")


class _GenerationBlock(Extension):
    """``{% generation %}...{% endgeneration %}``: marks the assistant's part for training
    masks in transformers; for inference it renders its body unchanged.

    The body becomes a call block, as in transformers, so a ``set`` inside it stays
    local to the block exactly as it does there.
    """

    tags = {"generation"}  # noqa: RUF012 - Extension declares it an instance attribute

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Callable[[], str]) -> str:
        return caller()


class _Namespace(Namespace):
    """``namespace()`` that refuses names starting with ``_`` (as transformers' does), so a
    template cannot stash or reach private attributes through it."""

    # ``self`` comes in ``args`` (Namespace's own trick) so that ``namespace(self=...)`` works.
    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _check_name(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_name(name)
        Namespace.__setitem__(self, name, value)


def _check_name(name: Any) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise SecurityError(f"a namespace cannot hold the private name {name!r}")


class _DictHelper:
    """The template's ``dict``: builds plain dicts, and nothing else reachable through it."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args)


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True, lstrip_blocks=True, autoescape=False,
            extensions=[loopcontrols, _GenerationBlock],
        )
        # Compiled templates are cached and shared, so the budget is per thread.
        self._local = threading.local()
        self.filters["tojson"] = _tojson
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals["range"] = self._range
        self.globals["dict"] = _DictHelper()
        self.globals["namespace"] = _Namespace

    @property
    def budget(self) -> _Budget:
        budget: _Budget | None = getattr(self._local, "budget", None)
        if budget is None:
            budget = self._local.budget = _Budget(RENDER_SECONDS)
        return budget

    @budget.setter
    def budget(self, value: _Budget) -> None:
        self._local.budget = value

    def _range(self, *args: int) -> range:
        # A real range, as in Python and transformers (``|length``, indexing, ``in``);
        # what a render may iterate in all is bounded up front instead of per step.
        span = range(*args)
        if len(span) > self.budget.range_left:
            raise TemplateError("chat template loops too many times")
        self.budget.range_left -= len(span)
        return span

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.budget.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.budget.tick()
        return super().getitem(obj, argument)

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        self.budget.tick()
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_REPEAT:
                raise TemplateError("chat template passed an absurd number to a function")
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self.budget.tick()
        if operator == "**":
            if isinstance(right, (int, float)) and abs(right) > 64:
                raise TemplateError("chat template computes an absurd power")
        elif operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                    if len(seq) * max(count, 0) > MAX_REPEAT:
                        raise TemplateError("chat template builds an absurdly large value")
        return super().call_binop(context, operator, left, right)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Hugging Face's tojson: plain json.dumps, no HTML escaping (unlike Jinja's).
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii,
                      separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise TemplateError(f"chat template raised: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=32)
def _compile(source: str) -> Any:
    env = _BoundedEnvironment()
    try:
        return env.from_string(source)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"invalid chat template (line {exc.lineno}): {exc.message}") from None


@lru_cache(maxsize=32)
def template_variables(source: str) -> frozenset[str]:
    """The global variables ``source`` reads (``enable_thinking``, ``tools``, ...);
    empty when it does not parse."""
    try:
        return frozenset(meta.find_undeclared_variables(_BoundedEnvironment().parse(source)))
    except TemplateSyntaxError:
        return frozenset()


def render_jinja(source: str, variables: dict[str, Any],
                 seconds: float = RENDER_SECONDS) -> str:
    """Render ``source`` with ``variables`` under the sandbox's limits."""
    template = _compile(source)
    env: _BoundedEnvironment = template.environment
    env.budget = _Budget(seconds)
    out: list[str] = []
    size = 0
    try:
        for chunk in template.generate(**variables):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateError("chat template output is too large")
            env.budget.tick()
            out.append(chunk)
    except TemplateError:
        raise
    except SecurityError as exc:
        raise TemplateError(f"chat template tried something unsafe: {exc}") from None
    except RecursionError:
        raise TemplateError("chat template recursed too deeply") from None
    except Exception as exc:  # any error inside untrusted template code
        raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from None
    return "".join(out)


RenderFn = Callable[[str, dict[str, Any]], str]
