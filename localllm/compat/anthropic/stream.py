"""Native ``/api/chat`` chunks -> Anthropic's Messages event stream.

:class:`MessageStream`, fed the native chunks of one reply in order, returns
Anthropic's server-sent events (the :class:`~localllm.compat.frames.FrameStream`
interface): ``message_start`` and a ``ping``, then per content block
``content_block_start`` / ``content_block_delta`` (``thinking_delta``,
``text_delta``, ``input_json_delta``) / ``content_block_stop``, and at the end
``message_delta`` (stop reason, usage) and ``message_stop``.  A failure after
the first event is an ``error`` event.  Blocks are those of
:func:`~localllm.compat.anthropic.response.message_object`, in the same order;
a tool call's whole input arrives in one ``input_json_delta`` (our parser emits
a call only once it is complete).
"""

from __future__ import annotations

import json

from localllm.api.wire import ChatChunk, StreamError
from localllm.compat.anthropic.errors import anthropic_error
from localllm.compat.anthropic.response import stop_reason, tool_use_block, usage
from localllm.compat.anthropic.types import (
    Block,
    MessageObject,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
)
from localllm.compat.frames import failure, new_id, sse

Event = tuple[str, StreamEvent]  # (SSE event name, data)


class MessageStream:
    """Turns the ``/api/chat`` stream of one reply into Anthropic's events."""

    def __init__(self, model: str, *, id: str | None = None, omit_thinking: bool = False) -> None:
        self.model = model
        # ``thinking.display: "omitted"``: the block is there, its text is not.
        self.omit_thinking = omit_thinking
        self.id = id or new_id("msg_")
        self._index = -1  # index of the last block started
        self._open: str | None = None  # "thinking" or "text" while such a block is open
        self._called_tools = False

    # -- the frames (see compat.frames.FrameStream) --------------------------------------

    def start(self) -> list[str]:
        # The prompt's size is known only once the runner has read it: the real
        # count comes with message_delta.
        message: MessageObject = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return _frames(
            [
                ("message_start", {"type": "message_start", "message": message}),
                ("ping", {"type": "ping"}),
            ]
        )

    def feed(self, native: ChatChunk | StreamError) -> list[str]:
        return _frames(self.events(native))

    def end(self) -> list[str]:
        return []  # the last chunk (done) ended the message

    def fail(self, exc: BaseException) -> list[str]:
        return _frames([error_event(*failure(exc))])

    # -- the events ---------------------------------------------------------------------

    def events(self, native: ChatChunk | StreamError) -> list[Event]:
        """Events for one native chunk (a mid-stream ``error`` becomes an error event)."""
        if "error" in native:
            return [error_event(500, str(native["error"]))]
        msg = native.get("message") or {}
        out: list[Event] = []
        if msg.get("thinking"):
            delta: ThinkingDelta = {"type": "thinking_delta", "thinking": msg["thinking"]}
            out += self._delta("thinking", None if self.omit_thinking else delta)
        if msg.get("content"):
            text: TextDelta = {"type": "text_delta", "text": msg["content"]}
            out += self._delta("text", text)
        for call in msg.get("tool_calls") or []:
            block = tool_use_block(call)
            partial = json.dumps(block["input"], ensure_ascii=False)
            out += self._close()
            out += self._begin({**block, "input": {}})
            out.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": self._index,
                        "delta": {"type": "input_json_delta", "partial_json": partial},
                    },
                )
            )
            out += self._close(force=True)
            self._called_tools = True
        if native.get("done"):
            out += self._close()
            reason, sequence = stop_reason(native, self._called_tools)
            out.append(
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": reason, "stop_sequence": sequence},
                        "usage": usage(native),
                    },
                )
            )
            out.append(("message_stop", {"type": "message_stop"}))
        return out

    def _delta(self, kind: str, delta: ThinkingDelta | TextDelta | None) -> list[Event]:
        """The block ``kind`` open (closing another), then ``delta`` in it, if any."""
        out: list[Event] = []
        if self._open != kind:
            out += self._close()
            start: Block = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "thinking"
                else {"type": "text", "text": ""}
            )
            out += self._begin(start)
            self._open = kind
        if delta is not None:
            out.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": self._index, "delta": delta},
                )
            )
        return out

    def _begin(self, block: Block) -> list[Event]:
        self._index += 1
        return [
            (
                "content_block_start",
                {"type": "content_block_start", "index": self._index, "content_block": block},
            )
        ]

    def _close(self, *, force: bool = False) -> list[Event]:
        if self._open is None and not force:
            return []
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self._index})]


def error_event(status: int, message: str) -> Event:
    return ("error", anthropic_error(status, message)[1])


def _frames(events: list[Event]) -> list[str]:
    return [sse(data, name) for name, data in events]
