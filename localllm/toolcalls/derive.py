"""A tool-call format derived from a chat template that no dedicated parser claims.

A template teaches its call syntax by how it writes calls into the history, so
the syntax can be read off the template itself: render an assistant turn that
answers in text, one that calls a made-up tool, and one that calls two; the
text where the renderings differ is the call markup, with the made-up name,
argument names, values and ids at known places.  From those places:

- a JSON value that holds the call (``{"name": .., "arguments": ..}`` under any
  key names, ``{"<name>": {..}}``, or a list of these) makes a JSON format: the
  markup before and after it open and close the calls (``jsonlist.py``);
- otherwise the name is followed by the arguments as JSON, or by one tagged
  element per argument: comparing the two calls, and the two arguments of the
  first, splits the markup into the pieces of a
  :class:`~localllm.toolcalls.tagged.Shape` (section, call open, name end,
  argument open, key end, argument close, call close), with a
  :data:`~localllm.toolcalls.tagged.WILD` where calls differ by more than their
  name (an index, a type attribute) and the call's id kept where it was written.

The reasoning tags are read the same way from a turn with reasoning.  Every
candidate is then checked by parsing the renderings back: a format is only
derived when its parser gives exactly the calls that were rendered.  Owns
:func:`derive` and :class:`Derived`.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from localllm.toolcalls.base import Syntax
from localllm.toolcalls.diff import (
    boundary,
    common_prefix,
    common_suffix,
    json_values,
    merge,
    raw_prefix_len,
    raw_suffix_len,
)
from localllm.toolcalls.jsonlist import JsonAfterMarker
from localllm.toolcalls.stream import MarkupParser
from localllm.toolcalls.tagged import IDENT, Shape, Tagged, marker_like

log = logging.getLogger(__name__)

FN1, FN2 = "alpha_fn", "beta_fn"
ARGS1: dict[str, Any] = {"first_key": "first_value", "second_key": 42}
ARGS2: dict[str, Any] = {"third_key": "third_value"}
ID1, ID2 = "Xq7Lm2Pz9", "Rt4Wv8Ky3"  # nine letters and digits, as Mistral's templates want
ANSWER, REASON, ASK = "ANSWERTEXT", "REASONTEXT", "USERQ"
_LAST_TAG = re.compile(r"(<[^<>\n]{1,40}>|\[[^\[\]\n]{1,40}\])\s*$")


def _tool(name: str, props: dict[str, str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": "A tool.",
        "parameters": {"type": "object", "required": list(props),
                       "properties": {k: {"type": t, "description": k}
                                      for k, t in props.items()}}}}


TOOLS = [_tool(FN1, {"first_key": "string", "second_key": "integer"}),
         _tool(FN2, {"third_key": "string"})]


@dataclass(frozen=True)
class JsonShape:
    """A JSON call format: its markup and the keys of a call object."""

    open: str
    close: str = ""
    name: str = "name"
    args: str = "arguments"
    ident: str = ""
    many: bool = False
    name_as_key: bool = False
    listed: bool = False  # the calls are one JSON array

    def syntax(self, strip: tuple[str, ...] = ()) -> JsonAfterMarker:
        return JsonAfterMarker(self.open, self.close, name=self.name, args=(self.args,),
                               ident=self.ident or "id", many=self.many,
                               name_as_key=self.name_as_key, strip=strip)


@dataclass(frozen=True)
class Derived:
    """A derived format: its call shape (tagged or JSON), its reasoning tags, and the
    markup the template wraps an answer in (``<|content|>``, an end-of-turn token:
    removed where the model writes it as text)."""

    shape: Shape | JsonShape
    think: tuple[str, str] | None = None
    markers: tuple[str, ...] = field(default=())
    wrappers: tuple[str, ...] = field(default=())

    def syntax(self) -> Syntax:
        if isinstance(self.shape, JsonShape):
            return self.shape.syntax(self.wrappers)
        return Tagged(replace(self.shape, extra_markers=(*self.shape.extra_markers,
                                                         *self.wrappers)))


@lru_cache(maxsize=64)
def derive(template: str) -> Derived | None:
    """The call format ``template`` teaches, when one can be derived and checked."""
    from localllm.template.select import is_jinja

    if not template.strip() or not is_jinja(template) or FN1 in template:
        return None
    try:
        return _derive(template)
    except RecursionError:
        return None


def _render(template: str, turn: dict[str, Any], *, then: bool = True,
            think: bool | None = None) -> str | None:
    """The conversation with ``turn`` as the assistant's, and (``then``) a user turn
    after it, so that every variant shows how the assistant's turn ends."""
    from localllm.template.chat import render_chat

    messages = [{"role": "user", "content": ASK}, turn]
    if then:
        messages.append({"role": "user", "content": ASK})
    try:
        return render_chat(template, messages, tools=TOOLS, add_generation_prompt=False,
                           bos_token="<s>", eos_token="</s>", think=think)
    except Exception:  # a template that refuses our made-up turn teaches us nothing
        return None


def _call(name: str, args: dict[str, Any], ident: str) -> dict[str, Any]:
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": args}}


def _derive(template: str) -> Derived | None:
    think = _think(template)
    for then in (True, False):
        text = _render(template, {"role": "assistant", "content": ANSWER}, then=then)
        empty = _render(template, {"role": "assistant", "content": ""}, then=then)
        one = _render(template, {"role": "assistant", "content": "",
                                 "tool_calls": [_call(FN1, ARGS1, ID1)]}, then=then)
        two = _render(template, {"role": "assistant", "content": "", "tool_calls": [
            _call(FN1, ARGS1, ID1), _call(FN2, ARGS2, ID2)]}, then=then)
        if text is None or one is None or FN1 not in one:
            continue
        m1 = _markup(one, [text, empty])
        m2 = _markup(two, [text, empty]) if two is not None else None
        if m2 is not None and FN2 not in m2:
            m2 = None  # the template writes only the first call
        wrappers = _wrappers(text)
        for shape in _candidates(m1, m2):
            found = Derived(shape, think, (*_markers(shape, think), *wrappers), wrappers)
            if _checks(found, m1, m2):
                return found
        log.debug("no tool-call format derived from the template (markup %r)", m1)
    return None


def _markup(rendered: str, others: list[str | None]) -> str:
    """The part of ``rendered`` that differs from every other rendering."""
    alts = [o for o in others if o is not None]
    start = min(raw_prefix_len(rendered, o) for o in alts)
    stop = len(rendered) - min(raw_suffix_len(rendered, o) for o in alts)
    # Never from inside a tag: "<|content|>" and "<|tool_calls|>" share "<|".
    while start > 0 and not boundary(rendered, start):
        start -= 1
    while stop < len(rendered) and not boundary(rendered, stop):
        stop += 1
    return rendered[start:max(start, stop)]


_WRAPPER = re.compile(r"<[|｜][^<>\s]{1,40}[|｜]>")


def _wrappers(text: str) -> tuple[str, ...]:
    """The special tokens right around the answer in a text turn: what the model writes
    around its text (``<|content|>``, ``<|END_OF_TURN_TOKEN|>``)."""
    at = text.find(ANSWER)
    before = _WRAPPER.findall(text[max(0, at - 80):at])
    after = _WRAPPER.findall(text[at + len(ANSWER):at + len(ANSWER) + 80])
    found = [t for t in (before[-1:] + after[:1]) if t not in (ASK,)]
    return tuple(dict.fromkeys(found))


def _think(template: str) -> tuple[str, str] | None:
    from localllm.toolcalls.thinking import detect_thinking_tags

    known = detect_thinking_tags(template)
    text = _render(template, {"role": "assistant", "content": ANSWER}, think=True)
    shown = _render(template, {"role": "assistant", "content": ANSWER,
                               "reasoning_content": REASON}, think=True)
    if text is None or shown is None or REASON not in shown or ANSWER not in shown:
        return known
    reason = shown.find(REASON, raw_prefix_len(shown, text))
    tag = _LAST_TAG.search(shown[:reason])
    opening = tag.group(1) if tag else ""
    closing = shown[reason + len(REASON):shown.find(ANSWER, reason)].strip()
    if known and known[1] in closing:
        return known
    if opening and closing and "\n" not in opening + closing and len(opening + closing) < 80:
        return opening, closing
    return known


def _markers(shape: Shape | JsonShape, think: tuple[str, str] | None) -> tuple[str, ...]:
    if isinstance(shape, Shape):
        found = list(shape.markers)
    else:
        found = [t for piece in (shape.open, shape.close) for t in piece.split()
                 if marker_like(t)]
    return tuple(dict.fromkeys([*found, *(think or ())]))


def _candidates(m1: str, m2: str | None) -> list[Shape | JsonShape]:
    found = _json_candidates(m1)
    if found:
        return found
    shape = _tagged(m1, m2)
    return [shape] if shape is not None else []


# -- JSON formats ---------------------------------------------------------------------

def _call_keys(value: Any) -> tuple[str, str, str, bool] | None:
    """(name key, args key, id key, name-as-key) when ``value`` is the first call."""
    if not isinstance(value, dict):
        return None
    if value == {FN1: ARGS1}:
        return "", "", "", True
    name = next((k for k, v in value.items() if v == FN1), None)
    args = next((k for k, v in value.items()
                 if v == ARGS1 or (isinstance(v, str) and _loads(v) == ARGS1)), None)
    if name is None or args is None:
        return None
    ident = next((k for k, v in value.items() if v == ID1), "")
    return name, args, ident, False


def _json_candidates(m1: str) -> list[Shape | JsonShape]:
    for start, end, value in json_values(m1):
        item = value[0] if isinstance(value, list) and len(value) == 1 else value
        keys = _call_keys(item)
        if keys is None:
            continue
        name, args, ident, as_key = keys
        if not m1[:start].strip():
            return []  # a bare JSON reply: not a marker we can wait for
        one = JsonShape(m1[:start], m1[end:].rstrip(), name or "name", args or "arguments",
                        ident, name_as_key=as_key, listed=item is not value)
        return [one, replace(one, many=True)]
    return []


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


# -- tagged formats -------------------------------------------------------------------

def _find_all(text: str, words: list[str], start: int) -> list[int] | None:
    """Where each of ``words`` occurs, in order, from ``start``."""
    out = []
    for word in words:
        at = text.find(word, start)
        if at < 0:
            return None
        out.append(at)
        start = at + len(word)
    return out


def _tagged(m1: str, m2: str | None) -> Shape | None:
    n1 = m1.find(FN1)
    args_json = json.dumps(ARGS1, ensure_ascii=False)
    spans = [s for s in json_values(m1[n1:]) if s[2] == ARGS1]
    if spans:
        return _tagged_json(m1, m2, n1, n1 + spans[0][0], n1 + spans[0][1])
    words = [FN1, "first_key", "first_value", "second_key", "42"]
    at = _find_all(m1, words, 0)
    if at is None or args_json in m1:
        return None
    return _tagged_xml(m1, m2, at)


def _tagged_json(m1: str, m2: str | None, n1: int, a0: int, a1: int) -> Shape | None:
    head, name_end, tail = m1[:n1], m1[n1 + len(FN1):a0], m1[a1:]
    ends = [name_end]
    between = None
    if m2 is not None:
        at = m2.find(FN2, len(m1[:a1]))
        spans = [s for s in json_values(m2[at:]) if s[2] == ARGS2] if at > 0 else []
        if at > 0 and spans:
            between = m2[a1:at]
            ends.append(m2[at + len(FN2):at + spans[0][0]])
    merged = merge(*ends)
    if merged is None:
        return None
    return _outer(head, tail, between, Shape(call_open="", name_end=merged, call_close=""))


def _tagged_xml(m1: str, m2: str | None, at: list[int]) -> Shape | None:
    n1, k1, v1, k2, v2 = at
    a = m1[n1 + len(FN1):k1]  # name end + argument open
    b = m1[v1 + len("first_value"):k2]  # argument close + argument open
    param_open = common_suffix(a, b)
    if not param_open.strip():
        return None
    name_ends = [a[:len(a) - len(param_open)]]
    key_ends = [m1[k1 + len("first_key"):v1], m1[k2 + len("second_key"):v2]]
    param_close = b[:len(b) - len(param_open)]
    tail, between = m1[v2 + 2:], None
    if m2 is not None:
        found = _find_all(m2, [FN2, "third_key", "third_value"], v2 + 2)
        if found is not None:
            n2, k3, v3 = found
            between = m2[v2 + 2:n2]
            a2 = m2[n2 + len(FN2):k3]
            if not a2.endswith(param_open):
                return None
            name_ends.append(a2[:len(a2) - len(param_open)])
            key_ends.append(m2[k3 + len("third_key"):v3])
    name_end, key_end = merge(*name_ends), merge(*key_ends)
    if name_end is None or key_end is None or not tail.startswith(param_close):
        return None
    if between is not None and not between.startswith(param_close):
        return None
    inner = Shape(call_open="", name_end=name_end, call_close="", json_args=False,
                  param_open=param_open, key_end=key_end, param_close=param_close)
    cut = len(param_close)
    return _outer(m1[:n1], tail[cut:], between[cut:] if between is not None else None, inner)


def _outer(head: str, tail: str, between: str | None, inner: Shape) -> Shape | None:
    """Split the markup around the calls into section and per-call pieces.

    ``head`` is all markup before the first name (section open + call open), ``tail``
    all after the last argument (call close + section close), ``between`` what lies
    between two calls (call close + separator + call open) when two were rendered."""
    head = head.replace(ID1, IDENT)
    if between is None:
        call_open, section_open = head, ""
        call_close, section_close = tail.rstrip(), ""
    else:
        between = between.replace(ID2, IDENT)
        call_close = common_prefix(tail, between)
        rest = between[len(call_close):]
        call_open = common_suffix(head, rest)
        section_open = head[:len(head) - len(call_open)]
        section_close = tail[len(call_close):].rstrip()
        if not call_open.strip():
            return None
    if not (call_open.strip() or section_open.strip()):
        return None
    return Shape(call_open=call_open, name_end=inner.name_end, call_close=call_close,
                 section_open=section_open, section_close=section_close,
                 json_args=inner.json_args, param_open=inner.param_open,
                 key_end=inner.key_end, param_close=inner.param_close)


# -- checking -------------------------------------------------------------------------

def _checks(found: Derived, m1: str, m2: str | None) -> bool:
    """Whether the derived parser reads back exactly the rendered calls."""
    want1 = [(FN1, ARGS1)]
    if _parse(found, m1) != (want1, ""):
        return False
    if m2 is not None and _parse(found, m2) != ([*want1, (FN2, ARGS2)], ""):
        return False
    return _parse(found, ANSWER) == ([], ANSWER)


def _parse(found: Derived, text: str) -> tuple[list[tuple[str, Any]], str]:
    parser = MarkupParser(found.syntax(), TOOLS, None, tags=None)
    out = parser.feed(text)
    out.extend(parser.finish())
    return [(c.name, c.arguments) for c in out.calls], out.content.strip()
