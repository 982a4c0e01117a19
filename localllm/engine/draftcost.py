"""Whether a step's drafts pay, from the engine's own step times (speculation under load).

A drafted token costs a row of the batch whether or not it is accepted; an
accepted one saves a whole step for its stream.  On one stream a step is mostly
its fixed cost (the weights are read once for every row), so rows are cheap and
drafting pays.  With many streams decoding on a device that computes for every
row, the batch already keeps it busy: a draft row costs about what a stream's own
row costs, and the drafts of a few streams make everyone's step longer.  Each
verify step also arrives as one long gap in every stream's output.

:class:`DraftCost` learns ``t(rows) = fixed + per_row * rows`` from the steps that
only decode (no prompt rows: a prompt chunk's rows cost differently, with no
logits), as an exponentially weighted least-squares line, so it follows the
device, the model and the contexts as they drift.  Until the rows have varied
enough to tell the slope, a row is taken to cost ``PRIOR_ROW_SHARE`` of a one-row
step.  :meth:`DraftCost.plan` then says, for a step about to hold ``rows``
decode rows of ``streams`` streams:

* ``price``: what one more row costs, in tokens the streams would have produced in
  that time (``per_row * streams / t(rows)``).  A draft's ``k``-th token is worth
  drafting when the chance it is accepted (``p ** k`` for a slot accepting a share
  ``p``; :func:`worth`) is above that price, so on one stream drafts run long and
  on a busy batch they stop;
* ``room``: draft rows the whole step may add before it takes ``MAX_STRETCH``
  times as long as the step without them, so no stream waits much longer for its
  next chunk than a plain step would make it.  A lone stream has no bound but the
  price: the step it waits for brings it every accepted token at once, so a copy
  runs at the speed its drafts earn (on a 2-core CPU a row costs ~60% of a one-row
  step, and the bound would hold a stream that copies to one draft a step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRIOR_ROW_SHARE = 0.1  # before the slope is known: a row costs a tenth of a 1-row step
MAX_STRETCH = 1.5  # a step with drafts takes at most this many times the plain step
_DECAY = 0.97  # weight kept by older steps at each new one (about 30 steps' memory)
_MIN_SPREAD = 0.5  # variance of the rows below which the slope is not trusted


@dataclass(frozen=True)
class DraftPlan:
    price: float  # tokens forgone per extra row
    room: int  # draft rows this step may add, all slots together


class DraftCost:
    """An online line through (decode rows, step time) of the steps that only decode."""

    def __init__(self) -> None:
        self._w = 0.0  # sums of weights, x, y, x*x, x*y
        self._x = self._y = self._xx = self._xy = 0.0
        self._one = 0.0  # moving average of a one-row step's time (the prior's scale)

    def observe(self, rows: int, dt_ns: int) -> None:
        """A decode-only step of ``rows`` rows took ``dt_ns``."""
        if rows <= 0 or dt_ns <= 0:
            return
        x, y = float(rows), float(dt_ns)
        self._w = self._w * _DECAY + 1.0
        self._x = self._x * _DECAY + x
        self._y = self._y * _DECAY + y
        self._xx = self._xx * _DECAY + x * x
        self._xy = self._xy * _DECAY + x * y
        if rows == 1:
            self._one = y if self._one == 0.0 else 0.8 * self._one + 0.2 * y

    def line(self) -> tuple[float, float] | None:
        """(fixed, per_row) in ns, or None before any step was seen."""
        if self._w == 0.0:
            return None
        mx, my = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mx * mx
        if var >= _MIN_SPREAD:
            slope = (self._xy / self._w - mx * my) / var
            slope = min(max(slope, 0.0), my / max(mx, 1.0))  # no row costs below 0 or above all
        else:
            one = self._one or my / max(mx, 1.0)
            slope = PRIOR_ROW_SHARE * one
        return max(my - slope * mx, 0.0), slope

    def plan(self, rows: int, streams: int) -> DraftPlan:
        """The price of a draft row and the room for them, next to ``rows`` decode rows."""
        line = self.line()
        if line is None or rows <= 0:
            return DraftPlan(price=0.0, room=1 << 30)  # nothing measured yet: as before
        fixed, per_row = line
        step = fixed + per_row * rows
        if per_row <= 0.0:
            return DraftPlan(price=0.0, room=1 << 30)
        price = per_row * max(streams, 1) / step
        if streams <= 1:
            # The drafting stream is the only one waiting, and its long verify step brings
            # it the accepted tokens at once: no one else's chunks are held up.
            return DraftPlan(price=price, room=1 << 30)
        room = int((MAX_STRETCH - 1.0) * step / per_row + 1e-6)  # not 0.9999... of a row
        return DraftPlan(price=price, room=max(room, 0))


def acceptance(accepted: int, rejected: int) -> float:
    """A slot's chance that its next drafted token is accepted: each drafted token the
    model checked was either accepted or the one a step stopped at (the tokens after
    that one were never judged), so accepted / (accepted + rejected), with one of each
    assumed before any draft was verified (1/2 to start).

    Counted per token, not from the run a step accepted: a run is cut short by the
    draft's own length (the step's room), so it would hold a slot that agrees every
    time to the short drafts it was allowed."""
    return (accepted + 1.0) / (accepted + rejected + 2.0)


def worth(p: float, price: float, limit: int) -> int:
    """How many tokens to draft (at most ``limit``): the k-th is accepted with ``p ** k``
    and is worth it while that beats ``price``."""
    if limit <= 0 or p <= 0.0:
        return 0
    if price <= 0.0:
        return limit
    if p >= 1.0:
        return limit if price < 1.0 else 0
    if price >= p:
        return 0
    return min(limit, int(math.log(price) / math.log(p)))
