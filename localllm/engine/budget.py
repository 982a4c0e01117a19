"""How many prompt tokens a step may carry while other requests generate (decode first).

A step's ``llama_decode`` holds every generating slot's next token and, after
them, chunks of new prompts.  Without a budget a prompt takes the whole batch at
once, as llama-server does: the fastest time to first token, but every running
stream waits for that big step.  ``LOCALLLM_STEP_BUDGET`` trades the other way:

* ``N`` tokens: a step holds at most N tokens while slots generate (prompts always
  get a quarter of it, so they are never starved);
* ``Nms``: a step should take about N milliseconds.  :class:`StepCost` learns what
  steps cost from the engine's own timings, the time of a step that only decodes
  and the time per prompt token, and lets prompts have what fits in the rest.

With no slot generating, prompts always fill the whole batch: nobody waits.
"""

from __future__ import annotations

from collections.abc import Callable

MIN_PROMPT_TOKENS = 16  # a prompt always advances, even when decoding alone fills the time
_PROMPT_SAMPLE = 32  # a step with fewer prompt tokens says little about their cost


class StepCost:
    """Moving averages of a decode-only step's time and of a prompt token's time."""

    def __init__(self, first_guess: int) -> None:
        self.first_guess = first_guess  # prompt tokens to allow before anything is measured
        self.decode_ns = 0.0  # a step holding only generating slots' tokens
        self.token_ns = 0.0  # one more prompt token in a step

    def observe(self, dt_ns: int, decoding: int, prompt: int) -> None:
        """One step: its time, and how many of its tokens were decode rows and prompt."""
        if prompt == 0:
            if decoding:
                self.decode_ns = _mix(self.decode_ns, dt_ns)
            return
        if prompt >= _PROMPT_SAMPLE:  # a few tokens' time is mostly the step's fixed cost
            rest = dt_ns - (self.decode_ns if decoding else 0.0)
            self.token_ns = _mix(self.token_ns, max(rest, 0.0) / prompt)

    def allowance(self, target_ns: float) -> int:
        """Prompt tokens that fit in a step of ``target_ns`` next to this step's decoding."""
        if self.token_ns <= 0.0:
            return max(MIN_PROMPT_TOKENS, self.first_guess)
        room = (target_ns - self.decode_ns) / self.token_ns
        return max(MIN_PROMPT_TOKENS, int(room))


def prompt_budget(step_tokens: int, step_ms: float, cost: StepCost) -> Callable[[int], int] | None:
    """The prompt tokens a step may add after ``n`` decode rows (None: no limit)."""
    if step_tokens > 0:
        return lambda n: max(step_tokens - n, step_tokens // 4)
    if step_ms > 0:
        return lambda n: cost.allowance(step_ms * 1e6)
    return None


def _mix(old: float, new: float) -> float:
    # Recent steps weigh most: the number of generating slots and their contexts drift.
    return new if old == 0.0 else 0.7 * old + 0.3 * new
