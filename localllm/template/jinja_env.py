"""The bounded Jinja environment that chat templates are compiled in and rendered by.

Jinja's immutable sandbox, with every hook it offers routed through the render's
``Budget`` (``jinja_limits``): attribute and item lookups, calls and all arithmetic
operators tick the deadline and size their operands and results; every filter and
every test of the environment is wrapped (not a chosen few), with the filter rules of
``jinja_filters`` and the call and operator rules of ``jinja_rules`` worked out before
the call.  What compiles to plain Python is rewritten at parse time to pass through
the checks too: each loop's items (counted, ticking), ``~``, and the lists, tuples and
dicts a template writes.  ``finalize`` sees every ``{{ }}`` value, and the join of a
macro's, call's or set block's text is bounded before it is made.

The helpers follow transformers' ``apply_chat_template``: trim_blocks,
lstrip_blocks, loopcontrols, the ``{% generation %}`` block, ``raise_exception``,
``strftime_now``, its ``tojson``, ``dict`` and a ``namespace`` that refuses private
names.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from types import BuiltinFunctionType
from typing import Any

from jinja2 import nodes, pass_context
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.runtime import Context, LoopContext, Macro, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, missing, object_type_repr
from jinja2.visitor import NodeTransformer

from localllm.template.jinja_filters import check_filter
from localllm.template.jinja_limits import (
    MAX_WIDTH,
    RENDER_SECONDS,
    Budget,
    TemplateError,
    TemplateLimitError,
    limit_message,
    shorten,
)
from localllm.template.jinja_rules import check_binop, check_call


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


class _Undefined(Undefined):
    """Jinja's undefined value, whose error message never writes out an arbitrary value: the
    key a template looked up may be anything it made (namespaces holding each other twice,
    40 deep, print for ever), and the message is built where no check runs (``<``)."""

    __slots__ = ()

    @property
    def _undefined_message(self) -> str:
        name = self._undefined_name
        if (
            self._undefined_hint
            or name is None
            or isinstance(name, (bool, float))
            or (isinstance(name, str) and len(name) <= 200)
            or (isinstance(name, int) and name.bit_length() <= 64)
        ):
            return str(super()._undefined_message)
        shown = f"<a {type(name).__name__}>"
        if self._undefined_obj is missing:
            return f"{shown} is undefined"
        return f"{object_type_repr(self._undefined_obj)} has no element {shown}"


def _helper(name: str, args: list[Any], lineno: int) -> nodes.Call:
    return nodes.Call(nodes.EnvironmentAttribute(name), args, [], None, None, lineno=lineno)


class _Bounder(NodeTransformer):
    """Routes what compiles to plain Python through the environment's checks: each loop's
    items, ``~`` and the lists, tuples and dicts a template writes."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _helper("bounded_loop", [node.iter], node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _helper("bounded_concat", node.nodes, node.lineno)

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        return _helper("bounded_value", [node], node.lineno)

    visit_List = visit_Dict = _literal

    def visit_Tuple(self, node: nodes.Tuple) -> nodes.Node:
        return self._literal(node) if node.ctx == "load" else self.generic_visit(node)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            autoescape=False,
            undefined=_Undefined,
            extensions=[loopcontrols, _GenerationBlock],
        )
        # Compiled templates are cached and shared, so the budget is per thread.
        self._local = threading.local()
        self.finalize = self._written
        self.concat = self._bounded_join  # type: ignore[method-assign]
        self.filters["tojson"] = _tojson
        self.filters = {name: guard(self, "filter", name, f) for name, f in self.filters.items()}
        self.tests = {name: guard(self, "test", name, f) for name, f in self.tests.items()}
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals["range"] = self._range
        self.globals["dict"] = _DictHelper()
        self.globals["namespace"] = _Namespace

    @property
    def budget(self) -> Budget:
        budget: Budget | None = getattr(self._local, "budget", None)
        if budget is None:  # outside a render (compiling): checks run, nothing is armed
            budget = self._local.budget = Budget(RENDER_SECONDS)
        return budget

    @budget.setter
    def budget(self, value: Budget | None) -> None:
        self._local.budget = value

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = _Bounder().visit(super()._parse(source, name, filename))
        bounded: nodes.Template = tree.set_environment(self)
        return bounded

    # -- what the rewritten templates call -------------------------------------------------
    def bounded_loop(self, iterable: Iterable[Any]) -> Iterator[Any]:
        budget = self.budget
        for item in iterable:
            budget.take_iteration()
            budget.tick()
            yield item

    def bounded_concat(self, *parts: Any) -> str:
        budget = self.budget
        texts = []
        for part in parts:
            if not isinstance(part, str):
                budget.size(part, "a value joined with ~")  # before str() builds it in C
            texts.append(str(part))
        budget.check_chars(sum(map(len, texts)), "the text ~ makes")
        return "".join(texts)

    def bounded_value(self, value: Any) -> Any:
        self.budget.size(value, "a list, tuple or dict written in the template")
        return value

    def _written(self, value: Any) -> Any:
        """``finalize``: sees every ``{{ }}`` value, in macros and set blocks too."""
        budget = self.budget
        if budget.armed:
            budget.tick()
            budget.take_emitted(
                len(value)
                if isinstance(value, str)
                else budget.size(value, "a value written by {{ }}")[1]
            )
        return value

    def _bounded_join(self, parts: Iterable[str]) -> str:
        """``concat``: how a macro, call or set block turns what it wrote into one text."""
        parts = list(parts)
        self.budget.check_chars(sum(map(len, parts)), "the text of a macro, call or set block")
        return "".join(parts)

    def _range(self, *args: int) -> range:
        # A real range, as in Python and transformers (``|length``, indexing, ``in``);
        # what a render may iterate in all is bounded up front instead of per step.
        span = range(*args)
        self.budget.take_range(len(span))
        return span

    # -- the sandbox's hooks ---------------------------------------------------------------
    def getattr(self, obj: Any, attribute: str) -> Any:
        self.budget.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.budget.tick()
        return super().getitem(obj, argument)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        # Jinja passes the loop's and block's variables along, for context functions.
        given = {k: v for k, v in kwargs.items() if k not in ("_loop_vars", "_block_vars")}
        if getattr(__obj, "__self__", None) is __self:  # bounded_loop and the like
            return __obj(*args, **given)
        budget = __self.budget
        budget.tick()
        if isinstance(__obj, LoopContext) and args:  # a recursive loop's next level
            args = (__self.bounded_loop(args[0]), *args[1:])
        what = _describe(__obj)
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, (str, bytes, list, tuple, dict)):
            budget.size(owner, f"the value {what} is called on")
        for value in (*args, *given.values()):
            budget.size(value, f"an argument of {what}")
        args = check_call(budget, __obj, args, given)
        if isinstance(__obj, Macro) or (
            isinstance(__obj, BuiltinFunctionType) and __obj.__name__ not in ("encode", "decode")
        ):
            # Template code (which ticks on its own), or C with nothing to watch inside
            # (codecs are Python: ``encode("punycode")``).
            out = super().call(__context, __obj, *args, **kwargs)
        else:
            out = budget.run(super().call, __context, __obj, *args, **kwargs)
        budget.size(out, f"the result of {what}")
        return out

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget = self.budget
        budget.tick()
        budget.size(left, f"the left side of {operator}")
        budget.size(right, f"the right side of {operator}")
        check_binop(budget, operator, left, right)
        if type(left) in _PLAIN and type(right) in _PLAIN:
            out = super().call_binop(context, operator, left, right)
        else:  # Markup's % escapes each value in Python, Undefined raises in Python...
            out = budget.run(super().call_binop, context, operator, left, right)
        budget.size(out, f"the result of {operator}")
        return out


# Types whose operators are C from start to end.
_PLAIN = frozenset({str, bytes, int, float, bool, list, tuple, dict, type(None)})


def _describe(obj: Any) -> str:
    if isinstance(obj, Macro):
        return f"macro {obj.name!r}"
    name = getattr(obj, "__name__", None)
    return f"{name!r}" if isinstance(name, str) else "a function"


def guard(env: BoundedEnvironment, kind: str, name: str, func: Any) -> Any:
    """``func`` (a filter or test) within the render's limits.  Context-passing, so that
    Jinja never runs it at compile time, outside any render's budget."""
    passes = getattr(getattr(func, "jinja_pass_arg", None), "name", None)
    first: Callable[[Context], tuple[Any, ...]] = {
        "context": lambda c: (c,),
        "eval_context": lambda c: (c.eval_ctx,),
        "environment": lambda c: (env,),
    }.get(passes or "", lambda c: ())
    label = f"{kind} {name!r}"

    @pass_context
    def guarded(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
        budget = env.budget
        budget.tick()
        budget.size(value, f"the value given to {label}")
        for arg in (*args, *kwargs.values()):
            budget.size(arg, f"an argument of {label}")
        if kind == "filter":
            value = check_filter(budget, env, name, value, args, kwargs)
        # Tests are predicates over values already sized: C, or Python that ticks.
        out = (budget.run if kind == "filter" else _call)(
            func, *first(context), value, *args, **kwargs
        )
        budget.size(out, f"the result of {label}")
        return out

    guarded.__name__ = guarded.__qualname__ = f"bounded_{name}"
    return guarded


def _call(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return func(*args, **kwargs)


def _tojson(
    value: Any,
    indent: int | str | None = None,
    ensure_ascii: bool = False,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Hugging Face's tojson: plain json.dumps, no HTML escaping (unlike Jinja's).
    return json.dumps(
        value, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise TemplateError(f"chat template raised: {shorten(str(message))}")


def _strftime_now(fmt: str) -> str:
    if len(fmt) > MAX_WIDTH:  # each directive may grow tenfold
        raise TemplateLimitError(
            limit_message(f"a strftime_now format longer than {MAX_WIDTH:,} characters")
        )
    return datetime.now().strftime(fmt)
