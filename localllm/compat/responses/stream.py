"""Native ``/api/chat`` chunks -> OpenAI Responses API objects and stream events.

Pure converter, owned here; the request side is
:mod:`localllm.compat.responses.request` and the route
:mod:`localllm.server.routes_responses`.  One :class:`ResponsesStream` turns a
run's native chunks, in order, into the Responses event stream (each event
with its ``sequence_number``, framed with an ``event:`` line naming its type,
as OpenAI sends them); the non-streamed answer is the same machine fed the
folded chunk (:func:`final_response`), so both shapes always agree.

Output items, in the order the model wrote them: ``reasoning`` (the native
``thinking``, as summary text), ``message`` (``output_text``), and one
``function_call`` per native tool call (arguments as a JSON string).  Text and
reasoning stream as deltas; a tool call arrives whole from the native parser,
so its arguments come as a single delta.  A reply cut by ``max_output_tokens``
ends ``incomplete`` with ``incomplete_details.reason = "max_output_tokens"``.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Literal, Unpack, cast

from localllm.api.wire import ChatChunk, Metrics, StreamError, ToolCall
from localllm.compat.frames import failure, new_id, sse
from localllm.compat.responses.types import (
    Echo,
    Event,
    EventFields,
    FunctionCallItem,
    MessageItem,
    OutputItem,
    OutputText,
    ReasoningItem,
    ResponseObject,
    ResponseUsage,
    SummaryText,
    Where,
)

Kind = Literal["message", "reasoning"]  # the items written a delta at a time


def _usage(native: Metrics) -> ResponseUsage:
    prompt = int(native.get("prompt_eval_count") or 0)
    output = int(native.get("eval_count") or 0)
    cached = int(native.get("prompt_cached_count") or 0)  # a part of input_tokens
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output,
    }


def _text_part(text: str) -> OutputText:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class ResponsesStream:
    """The events of one response; ``response`` is the object as it stands."""

    def __init__(
        self,
        model: str,
        echo: Echo,
        *,
        id: str | None = None,
        created_at: int | None = None,
    ) -> None:
        self.response: ResponseObject = {
            "id": id or new_id("resp_"),
            "object": "response",
            "created_at": created_at if created_at is not None else int(time.time()),
            "status": "in_progress",
            "error": None,
            "incomplete_details": None,
            "model": model,
            "output": [],
            "usage": None,
            "previous_response_id": None,
            "tools": [],
            "tool_choice": "auto",
            "parallel_tool_calls": True,
        }
        # Echo's keys are ResponseObject's own (its base): those set above keep their place.
        self.response.update(cast("ResponseObject", echo))
        self._seq = 0
        self._open: MessageItem | ReasoningItem | None = None  # the item being written
        self._text = ""
        self.finished = False

    @property
    def output(self) -> list[OutputItem]:
        return self.response["output"]

    def _event(self, kind: str, **fields: Unpack[EventFields]) -> Event:
        event: Event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def _lifecycle(self, kind: str) -> Event:
        return self._event(kind, response=copy.deepcopy(self.response))

    # -- the frames (see compat.frames.FrameStream) --------------------------------------

    def start(self) -> list[str]:
        return _frames(
            [self._lifecycle("response.created"), self._lifecycle("response.in_progress")]
        )

    def feed(self, native: ChatChunk | StreamError) -> list[str]:
        return _frames(self.events(native))

    def end(self) -> list[str]:
        return []  # the last chunk (done) completed the response

    def fail(self, exc: BaseException) -> list[str]:
        return _frames(self.failed(failure(exc)[1]))

    # -- items --------------------------------------------------------------------------

    def _add(self, item: OutputItem) -> list[Event]:
        self.output.append(item)
        return [
            self._event(
                "response.output_item.added",
                output_index=len(self.output) - 1,
                item=copy.deepcopy(item),
            )
        ]

    def _where(self) -> Where:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self.output) - 1}

    def _open_item(self, kind: Kind) -> list[Event]:
        if self._open is not None and self._open["type"] == kind:
            return []
        events = self._close()
        if kind == "message":
            self._open = {
                "id": new_id("msg_"),
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            events += self._add(self._open)
            events.append(
                self._event(
                    "response.content_part.added",
                    **self._where(),
                    content_index=0,
                    part=_text_part(""),
                )
            )
        else:
            self._open = {
                "id": new_id("rs_"),
                "type": "reasoning",
                "summary": [],
                "status": "in_progress",
            }
            events += self._add(self._open)
            events.append(
                self._event(
                    "response.reasoning_summary_part.added",
                    **self._where(),
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
            )
        self._text = ""
        return events

    def _delta(self, kind: Kind, text: str) -> list[Event]:
        events = self._open_item(kind)
        self._text += text
        if kind == "message":
            events.append(
                self._event(
                    "response.output_text.delta",
                    **self._where(),
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            )
        else:
            events.append(
                self._event(
                    "response.reasoning_summary_text.delta",
                    **self._where(),
                    summary_index=0,
                    delta=text,
                )
            )
        return events

    def _close(self, status: str = "completed") -> list[Event]:
        item = self._open
        if item is None:
            return []
        where, text = self._where(), self._text
        if item["type"] == "message":
            part = _text_part(text)
            item["content"] = [part]
            events = [
                self._event(
                    "response.output_text.done", **where, content_index=0, text=text, logprobs=[]
                ),
                self._event("response.content_part.done", **where, content_index=0, part=part),
            ]
        else:
            summary: SummaryText = {"type": "summary_text", "text": text}
            item["summary"] = [summary]
            events = [
                self._event(
                    "response.reasoning_summary_text.done", **where, summary_index=0, text=text
                ),
                self._event(
                    "response.reasoning_summary_part.done", **where, summary_index=0, part=summary
                ),
            ]
        item["status"] = status
        self._open = None
        return [
            *events,
            self._event(
                "response.output_item.done",
                output_index=where["output_index"],
                item=copy.deepcopy(item),
            ),
        ]

    def _call(self, call: ToolCall) -> list[Event]:
        events = self._close()
        fn = call.get("function") or {}
        args: object = fn.get("arguments", {})
        arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        item: FunctionCallItem = {
            "id": new_id("fc_"),
            "type": "function_call",
            "status": "in_progress",
            "call_id": call.get("id") or new_id("call_"),
            "name": fn.get("name", ""),
            "arguments": "",
        }
        events += self._add(item)
        where: Where = {"item_id": item["id"], "output_index": len(self.output) - 1}
        item.update({"arguments": arguments, "status": "completed"})
        return [
            *events,
            self._event("response.function_call_arguments.delta", **where, delta=arguments),
            self._event(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=arguments,
            ),
            self._event(
                "response.output_item.done",
                output_index=where["output_index"],
                item=copy.deepcopy(item),
            ),
        ]

    # -- the native stream ----------------------------------------------------------------

    def events(self, native: ChatChunk | StreamError) -> list[Event]:
        """Events for one native chunk (a mid-stream ``error`` fails the response)."""
        if "error" in native:
            return self.failed(str(native["error"]))
        msg = native.get("message") or {}
        events: list[Event] = []
        if msg.get("thinking"):
            events += self._delta("reasoning", msg["thinking"])
        if msg.get("content"):
            events += self._delta("message", msg["content"])
        for call in msg.get("tool_calls") or []:
            events += self._call(call)
        if native.get("done"):
            events += self._finish(native)
        return events

    def _finish(self, native: ChatChunk) -> list[Event]:
        cut = native.get("done_reason") == "length"
        status = "incomplete" if cut else "completed"
        events = self._close(status)
        if not self.output:  # nothing said: still answer with an (empty) message
            events += self._open_item("message") + self._close(status)
        self.response.update(
            {"status": status, "usage": _usage(native), "completed_at": int(time.time())}
        )
        if cut:
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        self.finished = True
        return [*events, self._lifecycle("response.incomplete" if cut else "response.completed")]

    def failed(self, message: str) -> list[Event]:
        """A failure after the stream began: an ``error`` event, then ``response.failed``."""
        self.finished = True
        self.response.update(
            {"status": "failed", "error": {"code": "server_error", "message": message}}
        )
        return [
            self._event("error", code="server_error", message=message, param=None),
            self._lifecycle("response.failed"),
        ]


def final_response(folded: ChatChunk, model: str, echo: Echo) -> ResponseObject:
    """A folded native ``/api/chat`` answer -> the Responses API ``response`` object."""
    stream = ResponsesStream(model, echo)
    stream.events(folded)
    return stream.response


def _frames(events: list[Event]) -> list[str]:
    return [sse(event, event["type"]) for event in events]
