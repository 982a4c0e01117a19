"""Foreign text made safe to print on a terminal: it reaches the screen as text, never as commands.

What the CLI prints from a GGUF file, a Modelfile layer, the Hub, another
daemon or a model passes through here first.  ``clean`` does a whole string,
``Sanitizer`` a stream (a model's answer, chunk by chunk).  Removed:

* every ESC-introduced sequence (ECMA-48): CSI ``ESC [ ... final``, the string
  commands OSC ``ESC ]`` (OSC 8 hyperlinks, OSC 52 clipboard writes, titles),
  DCS ``ESC P``, SOS ``ESC X``, PM ``ESC ^`` and APC ``ESC _`` up to BEL or ST,
  and two-character escapes (``ESC c`` resets the terminal, ``ESC ( 0`` swaps
  the character set), with their 8-bit C1 forms (U+0080-U+009F, CSI is U+009B);
* every other C0 control but ``\\n`` and ``\\t``: BEL, backspace, and ``\\r``.
  ``\\r`` is dropped rather than shown: a lone one moves the cursor back to the
  start of the line, so what follows overwrites (hides) what came before, and
  dropping it turns CRLF line ends (licences, Windows-made templates) into
  ``\\n`` with no look-ahead, which a stream could not have.

Other Unicode is kept as it is.  The colours localllm writes itself never come
through here: callers pass only the foreign pieces.

It is one left-to-right scan whose state survives the end of a chunk, so a
sequence cut between chunks is removed all the same, and nothing is held back:
the sequence's characters are dropped as they arrive.  A sequence still open
after ``MAX_SEQUENCE`` characters is given up on and the rest shown as text
(its ESC already gone), so a stray ``ESC ]`` cannot swallow the rest of an answer.
Runs are found with single character-class regexes, so the time is linear in the
input whatever it holds.
"""

from __future__ import annotations

import re

MAX_SEQUENCE = 4096

_GROUND, _ESC, _ESC_INTER, _CSI, _STRING, _STRING_ESC = range(6)

# Everything a terminal may act on, except the two we keep (\t, \n).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# The same less the ones that open a sequence (ESC, CSI and the five string openers).
_LONE_CONTROLS = re.compile("[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x8f\x91-\x97\x99-\x9a\x9c]*")
_CSI_BODY = re.compile("[\x20-\x3f]*")  # parameter and intermediate bytes
_INTERMEDIATE = re.compile("[\x20-\x2f]*")
_STRING_END = re.compile("[\x07\x18\x1a\x1b\x9c]")  # BEL, CAN, SUB, ESC (of ST), ST
_STRING_OPENERS = frozenset("]PX^_")  # after ESC: OSC, DCS, SOS, PM, APC
_C1_STRINGS = frozenset("\x90\x98\x9d\x9e\x9f")  # the same five as 8-bit controls
_CANCEL = frozenset("\x18\x1a")  # CAN and SUB abort a sequence


def clean(text: str) -> str:
    """``text`` without terminal control sequences or controls other than ``\\n`` and ``\\t``."""
    if _CONTROL.search(text) is None:  # the common case: nothing to do
        return text
    return Sanitizer().feed(text)


class Sanitizer:
    """``clean`` for a stream: ``feed`` each chunk, print what it returns.

    One per stream: a sequence left open at a chunk's end is still open when
    the next chunk starts.  Nothing is buffered, so there is nothing to flush.
    """

    def __init__(self) -> None:
        self._state = _GROUND
        self._seen = 0  # characters of the open sequence so far (for MAX_SEQUENCE)

    def feed(self, text: str) -> str:
        out: list[str] = []
        i, n = 0, len(text)
        state, seen = self._state, self._seen
        while i < n:
            if state == _GROUND:
                m = _CONTROL.search(text, i)
                if m is None:
                    out.append(text[i:])
                    break
                out.append(text[i : m.start()])
                c = text[m.start()]
                i = m.end()
                if c == "\x1b":
                    state, seen = _ESC, 1
                elif c == "\x9b":
                    state, seen = _CSI, 1
                elif c in _C1_STRINGS:
                    state, seen = _STRING, 1
                else:  # a control that acts alone: dropped with any that follow it
                    i = _LONE_CONTROLS.match(text, i).end()  # type: ignore[union-attr]
                continue
            if state in (_CSI, _ESC_INTER, _STRING):
                # Look no further than the cap: a scan that always ran to the end
                # of the text could be repeated once per sequence (quadratic).
                room = max(0, MAX_SEQUENCE - seen)
                limit = min(n, i + room + 1)
                if state == _STRING:
                    m = _STRING_END.search(text, i, limit)
                    stop = m.start() if m is not None else limit
                else:
                    body = _CSI_BODY if state == _CSI else _INTERMEDIATE
                    stop = body.match(text, i, limit).end()  # type: ignore[union-attr]
                if stop - i > room:
                    # Too long to be a real sequence: what is left of it is text.
                    i += room
                    state = _GROUND
                    continue
                seen += stop - i
                i = stop
                if i == n:
                    break  # the sequence goes on in the next chunk
            c = text[i]
            i += 1
            seen += 1
            if state == _STRING:
                state = _STRING_ESC if c == "\x1b" else _GROUND  # BEL, ST, CAN, SUB end it
            elif state == _STRING_ESC and c == "\\":
                state = _GROUND  # ESC \ is ST
            elif state == _STRING_ESC:
                # That ESC ended the string and starts a sequence of its own.
                state, seen, i = _ESC, 1, i - 1
            elif c == "\x1b":
                state, seen = _ESC, 1  # ESC inside a sequence starts another one
            elif c in _CANCEL:
                state = _GROUND
            elif c < "\x20":
                pass  # a C0 control inside a sequence: dropped, the sequence goes on
            elif state != _ESC:  # _CSI or _ESC_INTER, after its body
                state = _GROUND
                if c > "\x7e":
                    i -= 1  # DEL, C1 or text: the sequence is void, the character is not
            elif c == "[":
                state = _CSI
            elif c in _STRING_OPENERS:
                state = _STRING
            elif c <= "\x2f":
                state = _ESC_INTER
            else:
                state = _GROUND  # a two-character escape (ESC c, ESC 7, ...) ends here
                if c > "\x7e":
                    i -= 1  # not an escape: the character is text (or a control)
        self._state, self._seen = state, seen
        return "".join(out)
