"""The shim's short cut for top-k sampling draws exactly what llama.cpp's own chain draws.

When top-k is the chain's first cut (no penalties, no grammar), the shim hands
the chain only the top_k likeliest tokens, found in one pass over the logits,
instead of a vocabulary-sized candidate array (3x less time a token on Gemma's
262k vocabulary).  A vanishing presence penalty (1e-9) switches the short cut
off without changing any probability that matters, so the same seed must draw
the same tokens on both paths (where logits tie exactly, the two may list the
tied tokens in another order: the same distribution, other draws for a seed).
"""

from __future__ import annotations

from pathlib import Path

from localllm.engine.engine import Engine
from localllm.engine.sampling import Sampler
from localllm.runner.messages import SamplingParams
from tests.engine.conftest import opts


def test_top_k_short_cut_draws_what_the_full_chain_draws(tiny_attn: Path) -> None:
    with Engine([str(tiny_attn)], opts()) as e:
        e.batch.clear()
        for i, t in enumerate((1, 40, 41, 42)):
            e.batch.add(t, i, 0, i == 3)
        assert e.ctx.decode(e.batch) == 0
        row = len(e.batch) - 1
        # top_k 30: the tokens that succeed something, whose logits all differ (the
        # others' are exactly 0, and llama.cpp orders exact ties as it likes).
        hot = {"seed": 9, "temperature": 40.0, "top_p": 1.0, "top_k": 30}
        fast = Sampler(e.model, e.ctx, SamplingParams(**hot), 1)  # type: ignore[arg-type]
        full = Sampler(e.model, e.ctx,
                       SamplingParams(**hot, presence_penalty=1e-9), 1)  # type: ignore[arg-type]
        try:
            a = [fast.sample(row) for _ in range(400)]
            b = [full.sample(row) for _ in range(400)]
        finally:
            fast.close()
            full.close()
    assert len(set(a)) > 20  # hot enough that the draws spread over many tokens
    assert a == b
