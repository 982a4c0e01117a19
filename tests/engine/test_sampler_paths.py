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
from tests.support.engine_steps import opts
from tests.support.tinymodel import make_tiny_model


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
        full = Sampler(e.model, e.ctx, SamplingParams(**hot, presence_penalty=1e-9), 1)  # type: ignore[arg-type]
        try:
            a = [fast.sample(row) for _ in range(400)]
            b = [full.sample(row) for _ in range(400)]
        finally:
            fast.close()
            full.close()
    assert len(set(a)) > 20  # hot enough that the draws spread over many tokens
    assert a == b


def test_greedy_short_cut_picks_what_llama_cpp_s_greedy_sampler_picks(
    tiny_attn: Path, tmp_path: Path
) -> None:
    # The shim's greedy is a vectorised scan (max, then its first index); llama.cpp's
    # greedy sampler keeps the first maximum.  On a flat model every logit ties, so
    # both must pick token 0 at every row.
    flat = make_tiny_model(tmp_path, name="flat.gguf", sharpness=0.0)
    tokens = (1, 40, 41, 42, 43, 44, 45, 3, 7)
    for model, expect_flat in ((tiny_attn, False), (flat, True)):
        with Engine([str(model)], opts()) as e:
            e.batch.clear()
            for i, t in enumerate(tokens):
                e.batch.add(t, i, 0, True)
            assert e.ctx.decode(e.batch) == 0
            a, b = [], []
            for r in range(len(tokens)):
                # Fresh samplers per row: the penalty remembers what it drew and would
                # push the next tie elsewhere.
                fast = Sampler(e.model, e.ctx, SamplingParams(temperature=0.0), 1)
                full = Sampler(
                    e.model, e.ctx, SamplingParams(temperature=0.0, presence_penalty=1e-9), 1
                )
                try:
                    a.append(fast.sample(r))
                    b.append(full.sample(r))
                finally:
                    fast.close()
                    full.close()
        assert a == b
        assert (a == [0] * len(tokens)) == expect_flat
