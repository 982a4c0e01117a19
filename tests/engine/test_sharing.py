"""Prefix sharing across slots (engine/sharing.py): shared cells, same results.

The tiny model with attention on makes every logprob depend on the whole
context, so a shared cell that held the wrong keys or values, or sat at the
wrong position, changes the numbers: each test compares against the same
request run alone in a fresh engine.
"""

from __future__ import annotations

from pathlib import Path

from localllm.engine.engine import Engine
from tests.support.engine_steps import SYSTEM, alone, opts, req, run, same


def test_requests_arriving_together_share_the_first_ones_prefix(tiny_attn: Path) -> None:
    reqs = [req(f"u{i}", SYSTEM + q) for i, q in enumerate(["hi", "go", "ok.", "0"])]
    with Engine([str(tiny_attn)], opts(n_ctx=512, n_parallel=4, n_batch=64, n_ubatch=64)) as e:
        got = run(e, *reqs)
    cached = sorted(got[r.id].done.cached_tokens for r in reqs)  # type: ignore[union-attr]
    # One slot evaluates the system prompt; the others take it over as it grows.
    assert cached[0] < 64 and all(c >= len(SYSTEM) - 64 for c in cached[1:]), cached
    for r in reqs:
        same(got[r.id], alone(tiny_attn, r))


def test_a_busy_slot_shares_its_prefix_and_sharing_off_does_not(tiny_attn: Path) -> None:
    busy = req("busy", SYSTEM + "A", num_predict=60)  # "AAAA...": still generating
    late = req("late", SYSTEM + "be")
    for share in (True, False):
        with Engine(
            [str(tiny_attn)],
            opts(n_ctx=512, n_parallel=2, n_batch=64, n_ubatch=64, share_prefix=share),
        ) as e:
            e.submit(busy)
            for _ in range(8):  # the system prompt is in, the reply is under way
                e.step()
            got = run(e, late)
        assert got["late"].done is not None
        if share:
            assert got["late"].done.cached_tokens >= len(SYSTEM)
            assert got["busy"].done is not None and got["busy"].done.eval_count == 60
        else:
            assert got["late"].done.cached_tokens == 0
        same(got["late"], alone(tiny_attn, late))
