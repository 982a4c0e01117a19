"""Render Hugging Face chat templates (``tokenizer.chat_template``) in a bounded Jinja sandbox.

A GGUF's template is untrusted input.  It is compiled in ``jinja_env``'s sandbox
(only when no longer than ``MAX_TEMPLATE_CHARS``: compiling is slow) and rendered
within the limits of one render (``jinja_limits``): a deadline that stops the render
wherever Python runs, filters included; a size limit on every value the template
hands to or gets from a filter, test, method or operator, worked out before the call
where the result could be far larger than its inputs; totals for loops, ``range`` and
text written; and a cap on the rendered size.  A template past a limit, or trying
what the sandbox forbids, fails with ``TemplateLimitError`` (HTTP 400) naming it,
instead of stalling or exhausting the daemon; ``raise_exception`` and other errors
are a plain ``TemplateError`` (400).  An importable jinja2 older than 3.1.6 is refused
outright (``jinja_version``).  Published templates render exactly as transformers
renders them (tests/template/test_corpus.py).

``template_variables`` names the globals a template reads, which is how callers
learn what a template supports (think levels, tools).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from jinja2 import TemplateSyntaxError, meta
from jinja2.exceptions import SecurityError

from localllm.template.jinja_env import BoundedEnvironment
from localllm.template.jinja_limits import (
    MAX_OUTPUT_CHARS,
    MAX_TEMPLATE_CHARS,
    RENDER_SECONDS,
    Budget,
    Deadline,
    TemplateError,
    TemplateLimitError,
    limit_message,
    shorten,
)
from localllm.template.jinja_version import require_safe_jinja

__all__ = [
    "MAX_OUTPUT_CHARS",
    "RENDER_SECONDS",
    "RenderFn",
    "TemplateError",
    "TemplateLimitError",
    "render_jinja",
    "template_variables",
]


@lru_cache(maxsize=32)
def _compiled(source: str) -> Any:
    """The compiled template, or the error compiling it gave (kept too: compiling a long
    template costs seconds, and a refused one would otherwise pay them at every request)."""
    if len(source) > MAX_TEMPLATE_CHARS:
        return TemplateLimitError(
            limit_message(
                f"the template is longer than {MAX_TEMPLATE_CHARS:,} characters "
                "(compiling it would take too long)"
            )
        )
    try:
        return BoundedEnvironment().from_string(source)
    except TemplateSyntaxError as exc:
        return TemplateError(
            f"invalid chat template (line {exc.lineno}): {shorten(exc.message or '')}"
        )
    except (RecursionError, SyntaxError):  # Python's own limits: "too many nested blocks"
        return TemplateLimitError(limit_message("the template nests too deeply to compile"))
    except Exception as exc:  # the template is data: nothing in it may be a 500
        return TemplateError(f"invalid chat template: {type(exc).__name__}: {shorten(str(exc))}")


def _compile(source: str) -> Any:
    compiled = _compiled(source)
    if isinstance(compiled, TemplateError):
        raise type(compiled)(compiled.message)  # afresh: a kept one would gather tracebacks
    return compiled


@lru_cache(maxsize=32)
def template_variables(source: str) -> frozenset[str]:
    """The global variables ``source`` reads (``enable_thinking``, ``tools``, ...);
    empty when it does not parse."""
    if len(source) > MAX_TEMPLATE_CHARS:
        return frozenset()
    try:
        return frozenset(meta.find_undeclared_variables(BoundedEnvironment().parse(source)))
    except (TemplateSyntaxError, RecursionError):
        return frozenset()


def render_jinja(
    source: str, variables: Mapping[str, object], seconds: float = RENDER_SECONDS
) -> str:
    """Render ``source`` with ``variables`` under the sandbox's limits."""
    require_safe_jinja()
    template = _compile(source)
    env: BoundedEnvironment = template.environment
    budget = env.budget = Budget(seconds)
    out: list[str] = []
    size = 0
    stream = template.generate(**variables)
    try:
        budget.arm()
        try:
            for chunk in stream:
                size += len(chunk)
                if size > MAX_OUTPUT_CHARS:
                    budget.fail(f"the output is longer than {MAX_OUTPUT_CHARS:,} characters")
                out.append(chunk)
            budget.reraise()  # a limit error some filter caught and dropped
        finally:
            budget.armed = False  # no call: the profile hook may not fire in between
            budget.disarm()
            stream.close()
            env.budget = None
    except Deadline:
        raise budget.deadline_error() from None
    except TemplateError:
        raise
    except Exception as exc:  # any error inside untrusted template code
        if budget.failure is not None:
            raise budget.failure from None
        if isinstance(exc, SecurityError):  # what the sandbox forbids: hostile too
            raise TemplateLimitError(
                f"chat template tried something unsafe: {_text(exc)}"
            ) from None
        if isinstance(exc, RecursionError):
            raise TemplateLimitError(limit_message("recursed too deeply")) from None
        raise TemplateError(f"chat template failed: {type(exc).__name__}: {_text(exc)}") from None
    return "".join(out)


def _text(exc: Exception) -> str:
    """An error's message, unless it holds values a template made (a ``KeyError`` of one):
    printing those could take for ever."""
    if all(isinstance(a, (str, int, float)) for a in exc.args):
        return shorten(str(exc))
    return "(a message about the template's own values)"


RenderFn = Callable[[str, Mapping[str, object]], str]
