"""The state of a ``localllm run`` conversation and the requests built from it.

One ``Session`` serves both the one-shot mode and the interactive REPL: the
model, the history, the user's ``/set`` options, and how answers are shown.
Also here: parsing of the values ``run`` accepts (``--think``, ``--keepalive``,
``--format``, ``--truncate``, ``/set parameter`` values typed as Ollama types its
options), thinking turned on for a model that can think unless the user said
otherwise (as Ollama's ``run`` does), and ``preload``,
which ``run`` and the REPL's ``/load`` both send (``ensure_model``, their other
shared step, is ``pull.py``'s).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from localllm.errors import InvalidRequest

if TYPE_CHECKING:
    from localllm.api.bodies import ChatBody, ChatMessage, Options
    from localllm.api.client import Client
    from localllm.api.wire import JSONObject


@dataclass
class Session:
    model: str
    messages: list[ChatMessage] = field(default_factory=list)
    options: Options = field(default_factory=dict)
    system: str | None = None
    format: str | JSONObject | None = None  # "json" or a JSON schema
    keep_alive: str | None = None
    think: bool | str | None = None
    # --think or /set think|nothink said so: a model switch keeps it (else ``infer_think``).
    think_set: bool = False
    verbose: bool = False
    hide_thinking: bool = False
    wordwrap: bool = True
    truncate: bool | None = None  # embedding models: None = the daemon's default (truncate)
    dimensions: int = 0  # embedding models: 0 = the whole vector

    def infer_think(self, capabilities: Sequence[str]) -> None:
        """Think on a model that can, unless the user chose (Ollama's ``run`` does the same:
        its thinking then arrives apart from the answer, shown or hidden)."""
        if not self.think_set:
            self.think = True if "thinking" in capabilities else None

    def payload(self, messages: list[ChatMessage] | None = None) -> ChatBody:
        """The chat request body for ``messages`` (the history by default)."""
        history = self.messages if messages is None else messages
        sent = list(history)
        if self.system is not None:
            # Kept out of the history so that /clear and /set system stay independent.
            sent.insert(0, {"role": "system", "content": self.system})
        body: ChatBody = {"model": self.model, "messages": sent, "stream": True}
        if self.options:
            body["options"] = dict(self.options)
        if self.format:
            body["format"] = self.format
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        if self.think is not None:
            body["think"] = self.think
        return body


def session_from_args(args: argparse.Namespace) -> Session:
    session = Session(model=args.model)
    session.format = parse_format(args.format) if args.format else None
    if args.keepalive is not None:
        session.keep_alive = parse_keepalive(args.keepalive)
    session.think = parse_think(args.think)
    session.think_set = session.think is not None
    session.truncate = None if args.truncate is None else parse_go_bool("truncate", args.truncate)
    session.dimensions = max(args.dimensions or 0, 0)  # Ollama sends only a positive count
    session.verbose = bool(args.verbose)
    session.hide_thinking = bool(args.hidethinking)
    session.wordwrap = not args.nowordwrap
    return session


def parse_keepalive(text: str) -> str:
    """Check a ``--keepalive`` value here so a typo fails before any request."""
    from localllm.config import parse_duration

    try:
        parse_duration(text)
    except ValueError:
        raise InvalidRequest(
            f'invalid keepalive "{text}": use a duration such as 5m, 1h30m, 0 or -1'
        ) from None
    return text


def parse_format(text: str) -> str | JSONObject:
    """``--format``: ``json``, or a JSON schema the answer must follow (as Ollama's flag)."""
    if text.strip() == "json":
        return "json"
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if value == "json":
        return "json"
    if not isinstance(value, dict):
        raise InvalidRequest(f'invalid format "{text}": use json or a JSON schema object')
    return value


def parse_go_bool(flag: str, text: str) -> bool:
    """A boolean flag's ``=value`` as Ollama's CLI reads it (Go's ParseBool)."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise InvalidRequest(f'invalid value "{text}" for --{flag}: use true or false')


def parse_think(value: str | None) -> bool | str | None:
    """``--think`` (on), ``--think=false``, or a level: ``low|medium|high|max``."""
    if value is None:
        return None
    from localllm.api.thinkbudget import parse_think as parse

    # A flag's own ways to say on and off; the rest is the think field's one parser.
    low = value.strip().lower()
    if low in ("", "1", "on", "yes"):
        return True
    if low in ("0", "off", "no"):
        return False
    return parse(value)


def parse_parameter(name: str, values: list[str]) -> Any:
    """A ``/set parameter`` value with the type Ollama gives that option."""
    from localllm.api.options import OPTION_TYPES

    kind = OPTION_TYPES.get(name)
    if kind is None:
        raise InvalidRequest(f"unknown parameter '{name}'")
    if not values:
        raise InvalidRequest(f"missing value for parameter '{name}'")
    if kind == "array":
        return list(values)
    text = " ".join(values)
    try:
        if kind == "integer":
            return int(text)
        if kind == "float32":
            return float(text)
    except ValueError:
        raise InvalidRequest(f"parameter '{name}' needs a number, not '{text}'") from None
    if kind == "boolean":
        low = text.lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise InvalidRequest(f"parameter '{name}' needs true or false, not '{text}'")
    return text


def preload(client: Client, session: Session) -> None:
    """Load the model now so the first answer starts quickly."""
    client.load(session.model, keep_alive=session.keep_alive)
