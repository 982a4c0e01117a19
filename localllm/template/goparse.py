"""Lex and parse the subset of Go's text/template that Ollama TEMPLATEs use.

Supported: text and ``{{ pipeline }}`` actions with ``{{-``/``-}}`` trimming,
``{{/* comments */}}``, ``if``/``else if``/``else``/``end``, ``range`` (over a
list, map or integer, with ``$i, $e :=``), ``with``/``else with``, ``break``,
``continue``, variables (``$x := …``, ``$x = …``, ``$``, ``$.Field``), fields
(``.A.B``, ``(pipe).A``), literals (strings, raw strings, chars, numbers,
``true``/``false``/``nil``), parentheses and ``|`` pipelines.  ``define``,
``template`` and ``block`` are refused: Ollama's templates do not use them and
they are how a template recurses.

The tree is small plain dataclasses; ``gotemplate`` executes it.  Nesting is
capped, so a hostile template cannot exhaust the parser's stack, and lexing and
parsing are linear in the template: the source is never copied from a position
to its end, regexes match in place, and line numbers are counted once, forward
(a 1 MiB template of actions or comments took minutes when each of these was
redone per action).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from localllm.errors import InvalidRequest

MAX_NESTING = 64
# Real Go chat templates are under 10 KB; a parse tree's objects cost the collector's
# full passes (1 MB of template: 80 ms pauses with the lock held), so as for Jinja.
MAX_TEMPLATE_CHARS = 256 << 10


class GoTemplateError(InvalidRequest):
    """A Go template that cannot be parsed or executed (HTTP 400)."""


# -- the tree ------------------------------------------------------------------
@dataclass(slots=True)
class Text:
    text: str


@dataclass(slots=True)
class Pipe:
    decl: list[str]  # variable names, with "$"
    assign: bool  # "=" instead of ":="
    cmds: list[list[Any]]  # each command: operand nodes; the first may be a Func


@dataclass(slots=True)
class Action:
    pipe: Pipe
    line: int


@dataclass(slots=True)
class Branch:
    kind: str  # "if", "range", "with"
    pipe: Pipe
    body: list[Any]
    orelse: list[Any] | None
    line: int


@dataclass(slots=True)
class Loop:
    kind: str  # "break" or "continue"
    line: int


@dataclass(slots=True)
class Field:
    names: list[str]  # relative to dot: .A.B


@dataclass(slots=True)
class Var:
    name: str  # "$" or "$x"
    names: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Dot:
    pass


@dataclass(slots=True)
class Func:
    name: str


@dataclass(slots=True)
class Lit:
    value: Any


@dataclass(slots=True)
class Chain:
    pipe: Pipe
    names: list[str]


# -- lexing ----------------------------------------------------------------------
# Each token with the blanks before it (one match per token); the string and char
# patterns are written as "unrolled loops", which the regex engine runs without
# saving a backtracking point per character.
_TOKEN = re.compile(
    r"""
    [ \t\r\n]*
  (?:
    (?P<close>-?\}\})
  | (?P<declare>:=)
  | (?P<punct>[()|,=])
  | (?P<string>"[^"\\\n]*(?:\\.[^"\\\n]*)*")
  | (?P<raw>`[^`]*`)
  | (?P<char>'(?=[^'\n])[^'\\\n]*(?:\\.[^'\\\n]*)*')
  | (?P<number>[+-]?(?:0[xX][0-9a-fA-F_]+|(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?))
  | (?P<var>\$[A-Za-z0-9_]*)
  | (?P<field>\.[A-Za-z_][A-Za-z0-9_]*)
  | (?P<dot>\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<end>\Z)
  )
""",
    re.VERBOSE,
)
_COMMENT_END = re.compile(r"\s*(-?)\}\}")
_BLANKS = re.compile(r"[ \t\r\n]*")
_KEYWORDS = {
    "if",
    "else",
    "end",
    "range",
    "with",
    "break",
    "continue",
    "define",
    "template",
    "block",
    "nil",
    "true",
    "false",
}
_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
}


@dataclass(slots=True)
class Tok:
    kind: str
    text: str
    spaced: bool  # whitespace came right before it (fields chain only without it)


def unquote(text: str) -> str:
    """A Go interpreted string or char literal's value."""
    body = text[1:-1]
    if "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        elif nxt in "01234567":
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            raise ValueError(f"unknown escape \\{nxt}")
    return "".join(out)


def _lex_action(src: str, pos: int, line: int) -> tuple[list[Tok], int, bool]:
    """Tokens of the action starting at ``pos`` (after ``{{``); returns (tokens, end, trim)."""
    toks: list[Tok] = []
    match = _TOKEN.match
    while True:
        m = match(src, pos)
        if m is None:
            blanks = _BLANKS.match(src, pos)
            bad = blanks.end() if blanks else pos
            raise GoTemplateError(f"template: line {line}: unexpected {src[bad]!r} in action")
        kind = m.lastgroup or ""
        spaced = m.start(kind) > pos
        pos = m.end()
        if kind == "end":
            raise GoTemplateError(f"template: line {line}: unclosed action")
        text = m.group(kind)
        if kind == "close":
            if text.startswith("-") and not spaced:
                raise GoTemplateError(f"template: line {line}: bad trim marker -}}}}")
            return toks, pos, text.startswith("-")
        if kind == "number" and text[0] in "+-" and toks and not spaced:
            raise GoTemplateError(f"template: line {line}: unexpected {text!r}")
        toks.append(Tok(kind, text, spaced))


def lex(src: str) -> Iterator[Text | tuple[int, list[Tok]]]:
    """Text pieces and actions (line, tokens) of ``src``, trimmed as marked.

    A generator: the parser takes each action's tokens as they come, so they never
    all exist at once (a 1 MiB template has a few hundred thousand of them, and the
    garbage collector's passes over them cost more than the lexing).
    """
    if len(src) > MAX_TEMPLATE_CHARS:
        raise GoTemplateError(f"template is over {MAX_TEMPLATE_CHARS} characters")
    pos, trim_next = 0, False
    line, counted = 1, 0  # the line number at offset ``counted``
    while True:
        start = src.find("{{", pos)
        text = src[pos:] if start < 0 else src[pos:start]
        if trim_next:
            text = text.lstrip(" \t\r\n")
        if start < 0:
            if text:
                yield Text(text)
            return
        inner = start + 2
        line += src.count("\n", counted, start)
        counted = start
        if src.startswith("-", inner) and src[inner + 1 : inner + 2] in (" ", "\t", "\r", "\n"):
            text = text.rstrip(" \t\r\n")
            inner += 2
        if text:
            yield Text(text)
        if src.startswith("/*", inner):
            end = src.find("*/", inner)
            if end < 0:
                raise GoTemplateError(f"template: line {line}: unclosed comment")
            tail = _COMMENT_END.match(src, end + 2)
            if tail is None:
                raise GoTemplateError(f"template: line {line}: comment ends before closing }}}}")
            pos, trim_next = tail.end(), bool(tail.group(1))
            continue
        toks, pos, trim_next = _lex_action(src, inner, line)
        yield line, toks


# -- parsing ------------------------------------------------------------------------
class _Parser:
    def __init__(self, items: Iterator[Text | tuple[int, list[Tok]]], funcs: set[str]) -> None:
        self.items = items
        self.funcs = funcs
        self.depth = 0
        self.loops = 0

    def err(self, line: int, message: str) -> GoTemplateError:
        return GoTemplateError(f"template: line {line}: {message}")

    def nest(self, line: int) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.err(line, f"template nests deeper than {MAX_NESTING} levels")

    def parse_list(self) -> tuple[list[Any], str, int, list[Tok]]:
        """Nodes up to an ``else``/``end`` (returned with its line and remaining tokens)."""
        nodes: list[Any] = []
        for item in self.items:
            if isinstance(item, Text):
                nodes.append(item)
                continue
            line, toks = item
            if not toks:
                raise self.err(line, "missing value for command")
            head = toks[0].text if toks[0].kind == "ident" else ""
            if head in ("else", "end"):
                return nodes, head, line, toks[1:]
            if head in ("if", "range", "with"):
                nodes.append(self.branch(head, line, toks[1:]))
            elif head in ("break", "continue"):
                if self.loops == 0 or len(toks) > 1:
                    raise self.err(line, f"{{{{{head}}}}} outside {{{{range}}}}")
                nodes.append(Loop(head, line))
            elif head in ("define", "template", "block"):
                raise self.err(line, f'"{head}" is not supported in model templates')
            else:
                nodes.append(Action(self.pipeline(toks, line, decl_ok=True), line))
        return nodes, "", 0, []

    def branch(self, kind: str, line: int, toks: list[Tok]) -> Branch:
        self.nest(line)
        pipe = self.pipeline(toks, line, decl_ok=True, range_decl=kind == "range")
        if kind == "range":
            self.loops += 1
        body, stop, sline, rest = self.parse_list()
        if kind == "range":
            self.loops -= 1
        orelse: list[Any] | None = None
        if stop == "else":
            if rest and rest[0].kind == "ident" and rest[0].text in ("if", "with"):
                # "else if" is "else" + a nested "if" whose "end" closes both.
                orelse = [self.branch(rest[0].text, sline, rest[1:])]
                self.depth -= 1
                return Branch(kind, pipe, body, orelse, line)
            if rest:
                raise self.err(sline, "unexpected text after else")
            orelse, stop, sline, rest = self.parse_list()
        if stop != "end":
            raise self.err(line, f"unexpected EOF: {{{{{kind}}}}} has no {{{{end}}}}")
        if rest:
            raise self.err(sline, "unexpected text after end")
        self.depth -= 1
        return Branch(kind, pipe, body, orelse, line)

    def pipeline(
        self, toks: list[Tok], line: int, *, decl_ok: bool = False, range_decl: bool = False
    ) -> Pipe:
        decl: list[str] = []
        assign = False
        pos = 0
        if decl_ok and toks and toks[0].kind == "var":
            if (
                len(toks) > 1
                and toks[1].kind in ("declare", "punct")
                and toks[1].text in (":=", "=")
            ):
                decl, assign, pos = [toks[0].text], toks[1].text == "=", 2
            elif (
                range_decl
                and len(toks) > 3
                and toks[1].text == ","
                and toks[2].kind == "var"
                and toks[3].text in (":=", "=")
            ):
                decl, assign, pos = [toks[0].text, toks[2].text], toks[3].text == "=", 4
        pipe, pos = self.commands(toks, pos, line)
        if pos != len(toks):
            raise self.err(line, f"unexpected {toks[pos].text!r} in command")
        if not pipe:
            raise self.err(line, "missing value for command")
        return Pipe(decl, assign, pipe)

    def commands(self, toks: list[Tok], pos: int, line: int) -> tuple[list[list[Any]], int]:
        cmds: list[list[Any]] = []
        while True:
            cmd: list[Any] = []
            while pos < len(toks) and toks[pos].text not in ("|", ")"):
                node, pos = self.operand(toks, pos, line)
                cmd.append(node)
            if not cmd:
                if cmds or (pos < len(toks) and toks[pos].text == "|"):
                    raise self.err(line, "missing command in pipeline")
                return cmds, pos
            cmds.append(cmd)
            if pos < len(toks) and toks[pos].text == "|":
                pos += 1
                continue
            return cmds, pos

    def operand(self, toks: list[Tok], pos: int, line: int) -> tuple[Any, int]:
        tok = toks[pos]
        pos += 1
        node: Any
        if tok.kind == "punct" and tok.text == "(":
            self.nest(line)
            cmds, pos = self.commands(toks, pos, line)
            if pos >= len(toks) or toks[pos].text != ")":
                raise self.err(line, "unclosed left paren")
            self.depth -= 1
            pos += 1
            node = Chain(Pipe([], False, cmds), [])
        elif tok.kind == "dot":
            node = Dot()
        elif tok.kind == "field":
            node = Field([tok.text[1:]])
        elif tok.kind == "var":
            node = Var(tok.text)
        elif tok.kind in ("string", "char"):
            try:
                value = unquote(tok.text)
            except (ValueError, IndexError):
                raise self.err(line, f"bad literal {tok.text}") from None
            node = Lit(value if tok.kind == "string" else ord(value[:1] or "\0"))
        elif tok.kind == "raw":
            node = Lit(tok.text[1:-1])
        elif tok.kind == "number":
            node = Lit(_number(tok.text, line))
        elif tok.kind == "ident" and tok.text in ("true", "false", "nil"):
            node = Lit({"true": True, "false": False, "nil": None}[tok.text])
        elif tok.kind == "ident" and tok.text not in _KEYWORDS:
            if tok.text not in self.funcs:
                raise self.err(line, f'function "{tok.text}" not defined')
            node = Func(tok.text)
        else:
            raise self.err(line, f"unexpected {tok.text!r} in command")
        while pos < len(toks) and toks[pos].kind == "field" and not toks[pos].spaced:
            name = toks[pos].text[1:]
            if isinstance(node, (Field, Var, Chain)):
                node.names.append(name)
            elif isinstance(node, Dot):
                node = Field([name])
            else:
                raise self.err(line, f"unexpected .{name} after {tok.text}")
            pos += 1
        return node, pos


def _number(text: str, line: int) -> int | float:
    """A number literal as Go reads it: an integer if it fits 64 bits, else a finite float."""
    clean = text.replace("_", "")
    try:
        hexa = clean.lower().lstrip("+-").startswith("0x")
        if hexa or re.fullmatch(r"[+-]?\d+", clean):
            # Ints print with str(): one past 64 bits could be thousands of digits long.
            value = int(clean, 16 if hexa else 10)
            if -(1 << 63) <= value < 1 << 64:
                return value
            if hexa:
                raise ValueError(text)
        number = float(clean)
    except ValueError:
        raise GoTemplateError(f"template: line {line}: bad number {text[:64]}") from None
    if not math.isfinite(number):
        raise GoTemplateError(f"template: line {line}: number out of range {text[:64]}")
    return number


def parse(src: str, funcs: set[str]) -> list[Any]:
    """The tree of ``src``; ``funcs`` are the function names calls may use."""
    parser = _Parser(lex(src), funcs)
    nodes, stop, line, _ = parser.parse_list()
    if stop:
        raise parser.err(line, f"unexpected {{{{{stop}}}}}")
    return nodes
