"""The shape of a call's markup: what ``derive.py`` reads off a template's renderings.

Given the markup a template wrote for one call of a made-up tool (and for two,
when it writes several), with the made-up name, arguments and ids (the
sentinels here) at known places:

- a JSON value that holds the call (``{"name": .., "arguments": ..}`` under any
  key names, ``{"<name>": {..}}``, or a list of these) makes a
  :class:`~localllm.toolcalls.jsonlist.JsonShape`: the markup before and after it
  open and close the calls;
- otherwise the name is followed by the arguments as JSON, or by one tagged
  element per argument: comparing the two calls, and the two arguments of the
  first, splits the markup into the pieces of a
  :class:`~localllm.toolcalls.tagged.Shape` (section, call open, name end,
  argument open, key end, argument close, call close), with a
  :data:`~localllm.toolcalls.tagged.WILD` where calls differ by more than their
  name (an index, a type attribute) and the call's id kept where it was written.

Owns :func:`candidates`; ``derive.py`` keeps the candidate whose parser reads the
renderings back.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from localllm.api.wire import JSONObject
from localllm.toolcalls.diff import common_prefix, common_suffix, json_values, merge
from localllm.toolcalls.jsonlist import JsonShape
from localllm.toolcalls.tagged import IDENT, Shape

FN1, FN2 = "alpha_fn", "beta_fn"
ARGS1: JSONObject = {"first_key": "first_value", "second_key": 42}
ARGS2: JSONObject = {"third_key": "third_value"}
ID1, ID2 = "Xq7Lm2Pz9", "Rt4Wv8Ky3"  # nine letters and digits, as Mistral's templates want


def candidates(m1: str, m2: str | None) -> list[Shape | JsonShape]:
    """The shapes ``m1`` (one call) and ``m2`` (two, if the template writes several) may
    have, most likely first."""
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
    args = next(
        (k for k, v in value.items() if v == ARGS1 or (isinstance(v, str) and _loads(v) == ARGS1)),
        None,
    )
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
        one = JsonShape(
            m1[:start],
            m1[end:].rstrip(),
            name or "name",
            args or "arguments",
            ident,
            name_as_key=as_key,
            listed=item is not value,
        )
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
    head, name_end, tail = m1[:n1], m1[n1 + len(FN1) : a0], m1[a1:]
    ends = [name_end]
    between = None
    if m2 is not None:
        at = m2.find(FN2, len(m1[:a1]))
        spans = [s for s in json_values(m2[at:]) if s[2] == ARGS2] if at > 0 else []
        if at > 0 and spans:
            between = m2[a1:at]
            ends.append(m2[at + len(FN2) : at + spans[0][0]])
    merged = merge(*ends)
    if merged is None:
        return None
    return _outer(head, tail, between, Shape(call_open="", name_end=merged, call_close=""))


def _tagged_xml(m1: str, m2: str | None, at: list[int]) -> Shape | None:
    n1, k1, v1, k2, v2 = at
    a = m1[n1 + len(FN1) : k1]  # name end + argument open
    b = m1[v1 + len("first_value") : k2]  # argument close + argument open
    param_open = common_suffix(a, b)
    if not param_open.strip():
        return None
    name_ends = [a[: len(a) - len(param_open)]]
    key_ends = [m1[k1 + len("first_key") : v1], m1[k2 + len("second_key") : v2]]
    param_close = b[: len(b) - len(param_open)]
    tail, between = m1[v2 + 2 :], None
    if m2 is not None:
        found = _find_all(m2, [FN2, "third_key", "third_value"], v2 + 2)
        if found is not None:
            n2, k3, v3 = found
            between = m2[v2 + 2 : n2]
            a2 = m2[n2 + len(FN2) : k3]
            if not a2.endswith(param_open):
                return None
            name_ends.append(a2[: len(a2) - len(param_open)])
            key_ends.append(m2[k3 + len("third_key") : v3])
    name_end, key_end = merge(*name_ends), merge(*key_ends)
    if name_end is None or key_end is None or not tail.startswith(param_close):
        return None
    if between is not None and not between.startswith(param_close):
        return None
    inner = Shape(
        call_open="",
        name_end=name_end,
        call_close="",
        json_args=False,
        param_open=param_open,
        key_end=key_end,
        param_close=param_close,
    )
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
        rest = between[len(call_close) :]
        call_open = common_suffix(head, rest)
        section_open = head[: len(head) - len(call_open)]
        section_close = tail[len(call_close) :].rstrip()
        if not call_open.strip():
            return None
    if not (call_open.strip() or section_open.strip()):
        return None
    # The inner shape's name and argument markup inside the markup found around it.
    return replace(
        inner,
        call_open=call_open,
        call_close=call_close,
        section_open=section_open,
        section_close=section_close,
    )
