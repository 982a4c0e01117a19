"""Parse a Modelfile into a :class:`Modelfile`, with errors that name line and column.

Syntax (as Ollama's): one ``INSTRUCTION arguments`` per line, instructions in any
case, ``#`` starts a comment line, blank lines are ignored.  A value is bare text
to the end of the line (trimmed), ``"quoted"`` on one line (only the outer
quotes are removed, nothing is unescaped), or ``\"\"\"triple quoted\"\"\"`` spanning
lines, kept exactly.  Windows line endings are read as plain newlines.

``PARAMETER`` names and values are checked against ``api.options.OPTION_TYPES``
(the one list of valid names) through ``merge_options``, so a Modelfile is
refused here for the same reasons a request's options would be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from localllm.api.options import OPTION_TYPES, merge_options
from localllm.errors import InvalidRequest
from localllm.modelfile.checks import ROLES

# "projector" and "draft" are ours (Ollama has no Modelfile line for them): a vision
# projector file, and a draft model for speculative decoding.
INSTRUCTIONS = (
    "from",
    "parameter",
    "template",
    "system",
    "adapter",
    "license",
    "message",
    "requires",
    "projector",
    "draft",
)
# Newer Ollama instructions naming built-in Go renderers/parsers we do not have: accepted and
# ignored so that Modelfiles printed by a recent Ollama still build (the template still applies).
IGNORED = ("renderer", "parser")
MAX_MODELFILE_CHARS = 16 << 20


class ModelfileError(InvalidRequest):
    """A Modelfile that cannot be used; the message names line and column."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        where = f"line {line}, column {column}: " if line else ""
        super().__init__(f"{where}{message}")
        self.line = line
        self.column = column


@dataclass
class Modelfile:
    """The instructions of one Modelfile, in the shape ``/api/create`` takes them."""

    from_: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)  # typed values; stop is a list
    template: str | None = None
    system: str | None = None
    adapters: list[str] = field(default_factory=list)
    projector: str | None = None  # a vision projector (mmproj GGUF) path
    draft: str | None = None  # a draft model: a model name or a GGUF path
    licenses: list[str] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    requires: str | None = None
    from_line: int = field(default=0, compare=False)  # where FROM was, for error messages


class _Cursor:
    """Position in the text, counting lines and columns (1-based) for messages."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.col = 1

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def advance(self, n: int = 1) -> str:
        chunk = self.text[self.pos : self.pos + n]
        for ch in chunk:
            if ch == "\n":
                self.line += 1
                self.col = 1
            else:
                self.col += 1
        self.pos += len(chunk)
        return chunk

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip_blanks(self) -> None:
        """Spaces and tabs only: a newline ends an instruction."""
        while self.peek() in (" ", "\t") and not self.at_end():
            self.advance()

    def word(self) -> str:
        start = self.pos
        while not self.at_end() and self.peek() not in (" ", "\t", "\n"):
            self.advance()
        return self.text[start : self.pos]

    def rest_of_line(self) -> str:
        end = self.text.find("\n", self.pos)
        end = len(self.text) if end < 0 else end
        return self.advance(end - self.pos)

    def error(
        self, message: str, line: int | None = None, col: int | None = None
    ) -> ModelfileError:
        return ModelfileError(
            message, self.line if line is None else line, self.col if col is None else col
        )


def _value(cur: _Cursor, what: str) -> str:
    """Read one value (bare, quoted or triple-quoted) and the end of its line."""
    cur.skip_blanks()
    line, col = cur.line, cur.col
    if cur.peek(3) == '"""':
        cur.advance(3)
        end = cur.text.find('"""', cur.pos)
        if end < 0:
            raise cur.error(f'unterminated """ in {what}', line, col)
        # A value may end with quotes itself: the last three of a quote run close it.
        while cur.text.startswith('"', end + 3):
            end += 1
        value = cur.advance(end - cur.pos)
        cur.advance(3)
        _end_of_line(cur, what)
        return value
    text = cur.rest_of_line().strip()
    if text.startswith('"'):
        if len(text) < 2 or not text.endswith('"'):
            raise cur.error(f"unterminated quote in {what}", line, col)
        return text[1:-1]
    if not text:
        raise cur.error(f"missing value for {what}", line, col)
    return text


def _end_of_line(cur: _Cursor, what: str) -> None:
    cur.skip_blanks()
    if not cur.at_end() and cur.peek() != "\n":
        raise cur.error(f"unexpected text after the value of {what}")


def _parameter(mf: Modelfile, cur: _Cursor) -> None:
    cur.skip_blanks()
    line, col = cur.line, cur.col
    name = cur.word()
    if not name or name.startswith('"'):
        raise cur.error("PARAMETER needs a name and a value", line, col)
    key = name.lower()
    if key not in OPTION_TYPES:
        raise cur.error(f'unknown parameter "{name}"', line, col)
    vline, vcol = cur.line, cur.col
    raw = _value(cur, f"PARAMETER {name}")
    try:
        value = merge_options({key: raw}, None)[key]
    except InvalidRequest as exc:
        raise cur.error(
            f"invalid value for PARAMETER {name}: {exc.message}", vline, vcol + 1
        ) from None
    if key == "stop":
        mf.parameters.setdefault("stop", []).extend(value)
    else:
        mf.parameters[key] = value


def _message(mf: Modelfile, cur: _Cursor) -> None:
    cur.skip_blanks()
    line, col = cur.line, cur.col
    role = cur.word().lower()
    if role not in ROLES:
        raise cur.error(f'message role must be one of {", ".join(ROLES)}, got "{role}"', line, col)
    mf.messages.append({"role": role, "content": _value(cur, f"MESSAGE {role}")})


def parse(text: str) -> Modelfile:
    """Parse Modelfile ``text``; raises :class:`ModelfileError` (HTTP 400)."""
    if len(text) > MAX_MODELFILE_CHARS:
        raise ModelfileError("the Modelfile is too large")
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    cur = _Cursor(text)
    mf = Modelfile()
    while not cur.at_end():
        while not cur.at_end() and cur.peek() in (" ", "\t", "\n"):
            cur.advance()
        if cur.at_end():
            break
        if cur.peek() == "#":
            cur.rest_of_line()
            continue
        line, col = cur.line, cur.col
        word = cur.word()
        command = word.lower()
        if command in ("parameter",):
            _parameter(mf, cur)
        elif command == "message":
            _message(mf, cur)
        elif command in INSTRUCTIONS:
            _simple(mf, cur, command, line)
        elif command in IGNORED:
            _value(cur, word.upper())
        else:
            names = ", ".join(f'"{c}"' for c in INSTRUCTIONS)
            raise cur.error(
                f'unknown instruction "{word}": command must be one of {names}', line, col
            )
    if not mf.from_:
        raise ModelfileError("no FROM line")
    return mf


def _simple(mf: Modelfile, cur: _Cursor, command: str, line: int) -> None:
    value = _value(cur, command.upper())
    if command == "from":
        if mf.from_:
            raise cur.error("only one FROM line is allowed", line, 1)
        mf.from_ = value.strip()
        mf.from_line = line
    elif command == "template":
        mf.template = value
    elif command == "system":
        mf.system = value
    elif command == "adapter":
        mf.adapters.append(value.strip())
    elif command in ("projector", "draft"):  # one file each
        if getattr(mf, command) is not None:
            raise cur.error(f"only one {command.upper()} line is allowed", line, 1)
        setattr(mf, command, value.strip())
    elif command == "license":
        mf.licenses.append(value)
    elif command == "requires":
        mf.requires = value.strip()
