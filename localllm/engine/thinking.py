"""A thinking budget in the engine: count a reply's reasoning tokens, close the block when spent.

A request with ``think_budget >= 0`` gets a :class:`ThinkBudget`.  It reads
each generated token's text (control tokens written out) and follows the
reply: outside a thinking block until ``think_open`` appears (or inside from
the first token, when the prompt opened the block, as Qwen3's and DeepSeek-R1's
templates do), then inside until ``think_end``.  Every token inside counts;
when the count reaches the budget (and the text ends on a whole UTF-8
character, not on the start of the end marker), the block must close: the
engine (``Engine._close_thinking``) puts the message and the family's end
marker in the reply as *forced* tokens.  Their text is emitted at once, as a piece, so the output
parser sees the block close as if the model had closed it; batching.py then
decodes them like a prompt chunk (no sampling, the logits only after the last),
and the model answers from there.  Forcing happens only where it fits: the
forced tokens and at least one more must fit the slot's context and
``num_predict``, else the reply ends as it would have.

The budget is the reply's: a block the model opens again after its budget is
spent is closed at once.  A request with a grammar gets no budget: the grammar
decides every token, and a forced token it does not allow would desync it (the
forced-call grammars only let a call follow the close of a block the prompt
opened, so such a block holds nothing to count).  Speculation stops at the
forced tokens: no draft is verified in a step that forces (batching.py) and a
step that decides to force drops the drafts after that token (speculate.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from localllm.errors import InvalidRequest

if TYPE_CHECKING:
    from localllm.engine.model import Model
    from localllm.runner.messages import CompletionRequest

_OUT, _IN, _DONE = 0, 1, 2  # before a block, inside one, after one


class ThinkBudget:
    """One request's count of thinking tokens (see the module docstring)."""

    def __init__(
        self, budget: int, open_tag: bytes, end_tag: bytes, close: list[int], opened: bool
    ) -> None:
        self.left = budget  # thinking tokens still allowed in this reply
        self.open_tag, self.end_tag = open_tag, end_tag
        self.close = close  # message + end marker, as token ids
        self.state = _IN if opened else _OUT
        self._tail = b""  # the reply's last bytes: a marker may span several tokens
        self._utf8 = 0  # continuation bytes the reply's last character still needs
        self.due = opened and budget <= 0  # spent: close the block at the next chance

    def feed(self, piece: bytes) -> bool:
        """One generated token's text; True when the block must be closed after it."""
        self._utf8 = _utf8_needs(piece, self._utf8)
        seen = self._tail + piece
        if self.state == _IN:
            if self._found(seen, self.end_tag):
                self.state, self.due = _DONE, False
            else:
                self.left -= 1
                self.due = self.due or self.left <= 0
        elif self._found(seen, self.open_tag):
            self.state = _IN  # its first token is the next one
            self.due = self.left <= 0
        keep = max(len(self.open_tag), len(self.end_tag)) - 1
        self._tail = seen[-keep:] if keep > 0 else b""
        # Not mid-character, nor while the model may be writing the end marker itself.
        return (
            self.due
            and self._utf8 == 0
            and not (self.state == _IN and _partial(self._tail, self.end_tag))
        )

    def _found(self, seen: bytes, tag: bytes) -> bool:
        """Whether ``tag`` occurs in ``seen`` ending within the newest piece (occurrences
        wholly in the tail were looked at with the token that completed them)."""
        return bool(tag) and seen.find(tag, max(0, len(self._tail) - len(tag) + 1)) >= 0

    def closed(self) -> None:
        """The end marker has been forced: the reply is past the block."""
        self.state, self.due, self._tail = _DONE, False, b""


def think_budget(model: Model, req: CompletionRequest) -> ThinkBudget | None:
    """The request's budget, or None when it has none (or a grammar rules its tokens)."""
    if req.think_budget < 0 or not req.think_close or req.sampling.grammar:
        return None
    fields = (req.think_open, req.think_end, req.think_close, req.think_message)
    if not all(isinstance(f, str) for f in fields) or not isinstance(req.think_budget, int):
        raise InvalidRequest("malformed thinking budget")
    # The message is the client's text: never read as control tokens.  The marker is.
    close = (
        model.tokenize(req.think_message, add_special=False, parse_special=False)
        if req.think_message
        else []
    )
    close += model.tokenize(req.think_close, add_special=False, parse_special=True)
    return ThinkBudget(
        req.think_budget, req.think_open.encode(), req.think_end.encode(), close, req.think_opened
    )


def _partial(text: bytes, tag: bytes) -> bool:
    """Whether ``text`` ends with a proper prefix of ``tag``."""
    return any(text.endswith(tag[:k]) for k in range(1, len(tag)))


def _utf8_needs(data: bytes, need: int) -> int:
    """Continuation bytes still missing after ``data``, ``need`` missing before it."""
    for b in data:
        if need and 0x80 <= b < 0xC0:
            need -= 1
        else:  # a new character (a broken one is given up: the text shows U+FFFD)
            need = 3 if b >= 0xF0 else 2 if b >= 0xE0 else 1 if b >= 0xC0 else 0
    return need
