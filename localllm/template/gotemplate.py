"""A sandboxed, bounded interpreter for the Go text/template subset Ollama templates use.

``GoTemplate(src)`` parses once (``goparse``); ``execute(data)`` renders with
``data`` as dot.  Templates are untrusted (they arrive in Modelfiles and pulled
manifests), so execution has a :class:`Budget`: at most ``MAX_STEPS`` evaluated
nodes, ``MAX_OUTPUT_CHARS`` of output (and of any intermediate string, refused
while it is being built, not after), and ``RENDER_SECONDS`` of wall time,
checked every few steps and after every function call.  One budget can span
several executions (a legacy template runs once per turn of a chat).  Crossing
any of them raises ``GoTemplateError`` (HTTP 400) instead of hanging or
exhausting the daemon.  Variables are found by name in constant time, so many
declarations cost no more than a few.  Only the functions in ``gofuncs.FUNCS``
exist: templates cannot call methods, read files or reach Python objects.
"""

from __future__ import annotations

import time
from typing import Any

from localllm.template.gofuncs import (
    FUNC_NAMES,
    FUNCS,
    SIZED,
    GoStruct,
    ResultTooLong,
    go_str,
    sorted_keys,
    truth,
)
from localllm.template.goparse import (
    Action,
    Branch,
    Chain,
    Dot,
    Field,
    Func,
    GoTemplateError,
    Lit,
    Loop,
    Pipe,
    Text,
    Var,
    parse,
)

MAX_STEPS = 1_000_000
MAX_OUTPUT_CHARS = 4 << 20
RENDER_SECONDS = 2.0


class Budget:
    """What one render may spend, shared by every execution that is part of it."""

    def __init__(
        self,
        steps: int = MAX_STEPS,
        output: int = MAX_OUTPUT_CHARS,
        seconds: float = RENDER_SECONDS,
    ) -> None:
        self.steps = steps
        self.max_output = output
        self.output = output  # characters left
        self.deadline = time.monotonic() + seconds


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Exec:
    """State of one execution: variables, output, budget."""

    def __init__(self, data: Any, budget: Budget) -> None:
        self.vars: list[tuple[str, Any]] = []
        self.where: dict[str, list[int]] = {}  # name -> its indexes in vars, innermost last
        self.push("$", data)
        self.out: list[str] = []
        self.budget = budget
        self.max_output = budget.max_output
        self.line = 0

    def err(self, message: str) -> GoTemplateError:
        return GoTemplateError(f"template: line {self.line}: {message}")

    def tick(self) -> None:
        budget = self.budget
        budget.steps -= 1
        if budget.steps < 0:
            raise self.err("template execution exceeded its step limit (endless loop?)")
        if budget.steps % 64 == 0:
            self.clock()

    def clock(self) -> None:
        if time.monotonic() > self.budget.deadline:
            raise self.err("template took too long to render")

    def emit(self, text: str) -> None:
        self.budget.output -= len(text)
        if self.budget.output < 0:
            raise self.err(f"template output exceeds {self.max_output} characters")
        self.out.append(text)

    # -- variables ----------------------------------------------------------------------
    def push(self, name: str, value: Any) -> None:
        self.where.setdefault(name, []).append(len(self.vars))
        self.vars.append((name, value))

    def drop(self, mark: int) -> None:
        """Forget the variables declared since ``mark`` (the end of a scope)."""
        while len(self.vars) > mark:
            name, _ = self.vars.pop()
            self.where[name].pop()

    def lookup(self, name: str) -> Any:
        found = self.where.get(name)
        if not found:
            raise self.err(f"undefined variable: {name}")
        return self.vars[found[-1]][1]

    # -- statements -------------------------------------------------------------
    def walk(self, nodes: list[Any], dot: Any) -> None:
        for node in nodes:
            self.tick()
            if isinstance(node, Text):
                self.emit(node.text)
            elif isinstance(node, Action):
                self.line = node.line
                value = self.pipe(node.pipe, dot)
                if not node.pipe.decl:
                    self.emit(self.printed(value))
            elif isinstance(node, Branch):
                self.line = node.line
                self.branch(node, dot)
            elif isinstance(node, Loop):
                raise _Break() if node.kind == "break" else _Continue()

    def scoped(self, nodes: list[Any], dot: Any) -> None:
        mark = len(self.vars)
        try:
            self.walk(nodes, dot)
        finally:
            self.drop(mark)

    def branch(self, node: Branch, dot: Any) -> None:
        mark = len(self.vars)
        try:
            if node.kind == "range":
                self.range(node, dot)
                return
            value = self.pipe(node.pipe, dot)
            if truth(value):
                self.scoped(node.body, value if node.kind == "with" else dot)
            elif node.orelse is not None:
                self.scoped(node.orelse, dot)
        finally:
            self.drop(mark)

    def range(self, node: Branch, dot: Any) -> None:
        pipe = node.pipe
        value = self.pipe(Pipe([], False, pipe.cmds), dot)
        items: list[tuple[Any, Any]]
        if isinstance(value, (list, tuple)):
            items = list(enumerate(value))
        elif isinstance(value, dict):
            items = [(k, value[k]) for k in sorted_keys(value)]
        elif isinstance(value, int) and not isinstance(value, bool):
            # Lazily: a hostile "range 1000000000" must hit the step limit, not build a list.
            self._range_int(node, value, dot)
            return
        elif value is None:
            items = []
        else:
            raise self.err(f"range can't iterate over {go_str(value)}")
        if not items:
            if node.orelse is not None:
                self.scoped(node.orelse, dot)
            return
        for key, elem in items:
            if not self._iteration(node, key, elem):
                break

    def _range_int(self, node: Branch, count: int, dot: Any) -> None:
        if count <= 0:
            if node.orelse is not None:
                self.scoped(node.orelse, dot)
            return
        i = 0
        while i < count and self._iteration(node, i, i):
            i += 1

    def _iteration(self, node: Branch, key: Any, elem: Any) -> bool:
        """One pass of a range body; False after ``break``."""
        self.tick()
        mark = len(self.vars)
        decl = node.pipe.decl
        if len(decl) == 1:
            self.setvar(decl[0], elem, node.pipe.assign)
        elif len(decl) == 2:
            self.setvar(decl[0], key, node.pipe.assign)
            self.setvar(decl[1], elem, node.pipe.assign)
        try:
            self.walk(node.body, elem)
        except _Break:
            return False
        except _Continue:
            pass
        finally:
            self.drop(mark)
        return True

    def setvar(self, name: str, value: Any, assign: bool) -> None:
        if not assign:
            self.push(name, value)
            return
        found = self.where.get(name)
        if not found:
            raise self.err(f"undefined variable: {name}")
        self.vars[found[-1]] = (name, value)

    def printed(self, value: Any) -> str:
        """``value`` as text, refused once longer than the output left."""
        try:
            return go_str(value, max(self.budget.output, 0))
        except ResultTooLong:
            raise self.err(f"template output exceeds {self.max_output} characters") from None

    # -- expressions -----------------------------------------------------------------
    def pipe(self, pipe: Pipe, dot: Any) -> Any:
        value: Any = None
        for i, cmd in enumerate(pipe.cmds):
            value = self.command(cmd, dot, final=(value,) if i else ())
        if pipe.decl:
            self.setvar(pipe.decl[0], value, pipe.assign)
        return value

    def command(self, cmd: list[Any], dot: Any, final: tuple[Any, ...]) -> Any:
        self.tick()
        head = cmd[0]
        if isinstance(head, Func):
            return self.call(head.name, cmd[1:], dot, final)
        if len(cmd) > 1 or final:
            raise self.err(f"can't give argument to non-function {_describe(head)}")
        return self.operand(head, dot)

    def call(self, name: str, args: list[Any], dot: Any, final: tuple[Any, ...]) -> Any:
        if name in ("and", "or"):
            # Short-circuit, as Go 1.18+: return the first falsy (and) / truthy (or) operand.
            if not args and not final:
                raise self.err(f"wrong number of args for {name}: want at least 1 got 0")
            value: Any = None
            for arg in args:
                value = self.operand(arg, dot)
                if truth(value) == (name == "or"):
                    return value
            return final[0] if final else value
        values = [self.operand(a, dot) for a in args] + list(final)
        try:
            if name in SIZED:
                result = FUNCS[name](*values, limit=self.max_output)
            else:
                result = FUNCS[name](*values)
        except ResultTooLong:
            raise self.err(f"{name} result exceeds {self.max_output} characters") from None
        except GoTemplateError as exc:
            raise self.err(f"error calling {name}: {exc.message}") from None
        except TypeError:
            raise self.err(f"wrong number of args for {name}: got {len(values)}") from None
        except RecursionError:
            raise self.err(f"error calling {name}: value nests too deeply") from None
        if isinstance(result, str) and len(result) > self.max_output:
            raise self.err(f"{name} result exceeds {self.max_output} characters")
        self.clock()  # one call can take a while (a long string compared, measured, sliced)
        return result

    def operand(self, node: Any, dot: Any) -> Any:
        if isinstance(node, Lit):
            return node.value
        if isinstance(node, Dot):
            return dot
        if isinstance(node, Field):
            return self.fields(dot, node.names)
        if isinstance(node, Var):
            return self.fields(self.lookup(node.name), node.names)
        if isinstance(node, Chain):
            return self.fields(self.pipe(node.pipe, dot), node.names)
        if isinstance(node, Func):
            return self.call(node.name, [], dot, ())
        raise self.err("unexpected node")  # pragma: no cover - the parser makes no others

    def fields(self, value: Any, names: list[str]) -> Any:
        for name in names:
            self.tick()
            if isinstance(value, GoStruct):
                if name not in value.fields:
                    raise self.err(f"can't evaluate field {name} in type {value.type_name}")
                value = value.fields[name]
            elif isinstance(value, dict):
                value = value.get(name)
            elif value is None:
                return None  # Go would stop on a nil pointer; missing data prints <no value>
            else:
                raise self.err(f"can't evaluate field {name} in type {type(value).__name__}")
        return value


def _describe(node: Any) -> str:
    if isinstance(node, Field):
        return "." + ".".join(node.names)
    if isinstance(node, Var):
        return node.name + "".join("." + n for n in node.names)
    if isinstance(node, Lit):
        return go_str(node.value)
    return "."


class GoTemplate:
    """A parsed Go template; parse errors raise ``GoTemplateError`` here, not at render time."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.nodes = parse(source, FUNC_NAMES)

    def execute(
        self,
        data: Any,
        *,
        max_steps: int = MAX_STEPS,
        max_output: int = MAX_OUTPUT_CHARS,
        seconds: float = RENDER_SECONDS,
        budget: Budget | None = None,
    ) -> str:
        """The template's output for ``data``; ``budget`` (if given) replaces the limits."""
        state = _Exec(data, budget or Budget(max_steps, max_output, seconds))
        try:
            state.walk(self.nodes, data)
        except (_Break, _Continue):  # pragma: no cover - the parser only allows them in range
            pass
        except RecursionError:
            raise GoTemplateError("template nests too deeply") from None
        return "".join(state.out)

    def field_names(self) -> set[str]:
        """Every field name the template mentions (lower-cased), as Ollama's ``Vars``."""
        known: frozenset[str] | None = getattr(self, "_names", None)
        if known is None:  # once per template, not per render (a cached one may be large)
            names: set[str] = set()
            _collect(self.nodes, names)
            known = self._names = frozenset(names)
        return set(known)


def _collect(node: Any, names: set[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _collect(item, names)
    elif isinstance(node, (Field, Var)):
        names.update(n.lower() for n in node.names)
    elif isinstance(node, Chain):
        names.update(n.lower() for n in node.names)
        _collect(node.pipe, names)
    elif isinstance(node, Pipe):
        for cmd in node.cmds:
            _collect(cmd, names)
    elif isinstance(node, Action):
        _collect(node.pipe, names)
    elif isinstance(node, Branch):
        _collect(node.pipe, names)
        _collect(node.body, names)
        if node.orelse is not None:
            _collect(node.orelse, names)


def render(source: str, data: Any) -> str:
    """Parse and execute ``source`` with ``data`` as dot."""
    return GoTemplate(source).execute(data)
