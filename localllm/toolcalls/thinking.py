"""Split a stream of generated text into thinking and content at a reasoning tag pair.

Owns the ``<think>``-style splitting (``<think>``, ``<seed:think>``, ``[THINK]``,
Command-R7B's ``<|START_THINKING|>``) used by every marker-based format.
Reasoning models open their reply with a thinking block.  Some templates
pre-open it (the rendered prompt ends with ``<think>``), so the reply starts
inside the block: :func:`prompt_opens_thinking` tells, and the splitter then
starts in thinking.  The splitter never emits a prefix of a tag: text that might
be the start of one is held until the next piece decides.  Whitespace right
inside the block and right after it is formatting, and is dropped.  A reply that
starts with the close tag alone closes a block the prompt opened without our
knowing (a forced tool call ignores the prompt's open block): the tag is dropped.
In a block the prompt opened, the open tag written again is dropped, and markup
that cannot be reasoning (a call, an answer's wrapper: ``exits``) written first
means the model skipped its reasoning.
"""

from __future__ import annotations

from localllm.toolcalls.base import partial_tag_len

# Tag pairs seen in chat templates.  Checked in this order, so a template that also
# mentions ``</think>`` in passing (in its instructions) gets its own pair.
KNOWN_TAGS: tuple[tuple[str, str], ...] = (
    ("<seed:think>", "</seed:think>"),
    ("[THINK]", "[/THINK]"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
    ("<mm:think>", "</mm:think>"),  # MiniMax-M3
    ("<|channel>thought", "<channel|>"),  # Gemma 4
    ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),  # Kimi K3
    ("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),  # Apriel 1.6
    ("<think>", "</think>"),
)


def detect_thinking_tags(template: str) -> tuple[str, str] | None:
    """The thinking tags a chat template uses, if it mentions a known pair."""
    for open_tag, close_tag in KNOWN_TAGS:
        if close_tag in template:
            return open_tag, close_tag
    return None


def prompt_opens_thinking(
    prompt: str, open_tag: str = "<think>", close_tag: str = "</think>"
) -> bool:
    """True when the rendered prompt ends inside an opened thinking block."""
    at = prompt.rfind(open_tag)
    return at >= 0 and not prompt[at + len(open_tag) :].strip() and close_tag not in prompt[at:]


class ThinkingSplitter:
    """Incremental splitter: ``feed(piece) -> (thinking, content)``, then ``finish()``."""

    def __init__(
        self,
        open_tag: str = "<think>",
        close_tag: str = "</think>",
        *,
        opened: bool = False,
        exits: tuple[str, ...] = (),
    ) -> None:
        self.open_tag = open_tag
        self.close_tag = close_tag
        self._state = "opened" if opened else "start"
        self._trim = opened  # drop whitespace right after the (pre-)opened tag
        self._buf = ""
        # Markup that, first thing in a block the prompt opened, means the model skipped
        # its reasoning (a call, an answer's wrapper): the reply is content from there.
        self._exits = exits

    @property
    def in_thinking(self) -> bool:
        return self._state in ("thinking", "opened")

    def feed(self, text: str) -> tuple[str, str]:
        self._buf += text
        thinking, content = "", ""
        if self._state == "opened":
            stripped = self._buf.lstrip()
            if stripped.startswith(self.open_tag):  # the model opened it once more
                self._buf = stripped[len(self.open_tag) :]
                self._state = "thinking"
            elif stripped.startswith(self.close_tag):  # an empty block (a budget of 0)
                self._state = "thinking"
            elif self.close_tag.startswith(stripped):
                return "", ""  # may be the close tag, which may start like an exit
            elif any(stripped.startswith(m) for m in self._exits):
                self._buf = stripped
                self._state, self._trim = "content", False
            elif not stripped or any(m.startswith(stripped) for m in (self.open_tag, *self._exits)):
                return "", ""  # still undecided
            else:
                self._state = "thinking"
        if self._state == "start":
            stripped = self._buf.lstrip()
            if stripped.startswith(self.open_tag):
                self._buf = stripped[len(self.open_tag) :]
                self._state, self._trim = "thinking", True
            elif stripped.startswith(self.close_tag):
                self._buf = stripped[len(self.close_tag) :]
                self._state, self._trim = "content", True
            elif (
                not stripped
                or self.open_tag.startswith(stripped)
                or self.close_tag.startswith(stripped)
            ):
                return "", ""  # could still become the opening (or a lone closing) tag
            else:
                self._state = "content"
        if self._state == "thinking":
            if self._trim:
                self._buf = self._buf.lstrip()
                self._trim = not self._buf
            at = self._buf.find(self.close_tag)
            if at >= 0:
                thinking = self._buf[:at].rstrip()
                self._buf = self._buf[at + len(self.close_tag) :]
                self._state, self._trim = "content", True
            else:
                # Hold a possible partial close tag, and trailing whitespace that the
                # close tag would make redundant.
                cut = len(self._buf) - partial_tag_len(self._buf, self.close_tag)
                cut = len(self._buf[:cut].rstrip())
                thinking, self._buf = self._buf[:cut], self._buf[cut:]
                return thinking, ""
        if self._state == "content":
            if self._trim:
                self._buf = self._buf.lstrip()
                self._trim = not self._buf
            content, self._buf = self._buf, ""
        return thinking, content

    def finish(self) -> tuple[str, str]:
        """End of generation: an unclosed block's text is thinking; a lone partial tag content."""
        thinking, content = self.feed("")
        if self._state == "opened":
            thinking += self._buf.strip()
        elif self._state == "thinking":
            thinking += self._buf.rstrip()
        elif self._state == "start":
            content += self._buf
        self._buf = ""
        self._state = "done"
        return thinking, content
