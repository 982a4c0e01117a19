"""The samplers past Ollama's, through the real libllama on the tiny model (engine/sampling.py).

The tiny model's next token is a fixed successor of the last one, with logit 10
against 0 for every other token (tests/support/tinymodel.py): "a" is followed by
"bcd...z", and "A" by "A" for ever (the loop DRY must break).  Each test compares
a setting's output with what the same request gives without it, so a sampler that
were accepted and dropped would fail it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localllm.engine.device_sampling import on_device
from localllm.engine.engine import Engine
from localllm.engine.sampling import DeviceChain
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import Result, opts, run
from tests.support.tinymodel import LOOP_PROMPT, expected_greedy, token_id

X = token_id("x")
C = token_id("c")


def req(id: str, prompt: str, n: int = 6, **sampling: Any) -> CompletionRequest:
    sampling.setdefault("temperature", 0.0)
    return CompletionRequest(
        id=id, prompt=prompt, num_predict=n, sampling=SamplingParams(**sampling)
    )


def texts(e: Engine, *reqs: CompletionRequest) -> dict[str, str]:
    out: dict[str, Result] = run(e, *reqs)
    for k, r in out.items():
        assert r.failed is None, (k, r.failed)
    return {k: r.text for k, r in out.items()}


def test_a_bias_of_100_forces_a_token_and_minus_100_bans_one(tiny: Path) -> None:
    hot: dict[str, Any] = {"temperature": 1.0, "top_k": 40, "top_p": 0.9, "seed": 3}  # Ollama's
    with Engine([str(tiny)], opts(n_parallel=4)) as e:
        got = texts(
            e,
            req("plain", "a"),
            req("force", "a", logit_bias=[(X, 100.0)]),
            req("force-hot", "a", logit_bias=[(X, 100.0)], **hot),
            req("ban", "a", logit_bias=[(C, -100.0)]),
        )
        # A text key biases its tokens, as llama-server; false (-inf) bans outright.
        got |= texts(
            e,
            req("text", "a", logit_bias=[("x", 100.0)]),
            req("banned", "a", logit_bias=[(C, float("-inf"))]),
        )
    assert got["plain"] == expected_greedy("a", 6) == "bcdefg"
    assert got["force"] == got["force-hot"] == got["text"] == "xxxxxx"
    assert got["ban"][0] == "b" and "c" not in got["ban"] and got["ban"] == got["banned"]


def test_a_token_outside_the_vocabulary_is_refused(tiny: Path) -> None:
    with Engine([str(tiny)], opts()) as e:
        r = run(e, req("r", "a", logit_bias=[(10**6, 5.0)]))["r"]
    assert r.failed is not None and "logit_bias" in r.failed.message


def test_dry_breaks_the_loop_and_sees_the_prompt(tiny: Path) -> None:
    dry = {"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2}
    with Engine([str(tiny)], opts(n_parallel=3)) as e:
        got = texts(
            e,
            req("loop", LOOP_PROMPT, n=20),
            req("dry", LOOP_PROMPT, n=20, **dry),
            req("long", "A" * 12, n=20, **dry),
        )
        off = texts(e, req("off", LOOP_PROMPT, n=20, **dry, dry_penalty_last_n=0))["off"]
    assert got["loop"] == "A" * 20 == off
    # 0.8 * 1.75 ** (n - 2) passes the logit margin of 10 at a repeat of 7 tokens.
    assert 3 <= got["dry"].count("A") < 12 and not got["dry"].startswith("A" * 12)
    # A prompt that already repeats: DRY, fed the prompt, cuts the loop at once.
    assert not got["long"].startswith("A")


def test_grammar_constrains_as_its_own_field(tiny: Path) -> None:
    # "a" goes on "bcd...": the grammar lets "b" and "c" through, then only the end.
    with Engine([str(tiny)], opts()) as e:
        got = texts(e, req("g", "a", n=10, grammar="root ::= [a-c]+"))
    assert got["g"] == "bc"


def test_xtc_drops_the_likeliest_token(tiny: Path) -> None:
    # A bias makes "x" (10.5) a little likelier than "b" (10) after "a": both pass the
    # threshold, so XTC (probability 1: always) removes all but the least likely of them.
    near = {"logit_bias": [(X, 10.5)]}
    with Engine([str(tiny)], opts(n_parallel=2)) as e:
        got = texts(
            e,
            req("near", "a", n=1, **near),
            req("xtc", "a", n=1, **near, xtc_probability=1.0, xtc_threshold=0.1),
        )
        high = texts(e, req("t", "a", n=1, **near, xtc_probability=1.0, xtc_threshold=0.6))
    assert got == {"near": "x", "xtc": "b"}
    assert high["t"] == "x"  # a threshold over 0.5 turns XTC off, as llama.cpp


@pytest.mark.parametrize(
    "setting",
    [
        {"top_n_sigma": 1.0},
        {"mirostat": 2, "mirostat_tau": 0.1},
        {"mirostat": 1, "mirostat_tau": 0.1},
    ],
)
def test_truncating_samplers_keep_a_hot_chain_on_the_top_token(
    tiny: Path, setting: dict[str, Any]
) -> None:
    # At temperature 2 over the whole vocabulary the top token holds ~31% of the mass:
    # the plain chain wanders.  Top-n-sigma 1 keeps only tokens within one standard
    # deviation of the top logit (only it); mirostat at a target surprise of 0.1 bits
    # keeps only it too.  So their text is the greedy one, seed after seed.
    hot = {"temperature": 2.0, "top_k": 0, "top_p": 1.0}
    reqs = [req(f"plain{s}", "a", n=12, seed=s, **hot) for s in range(4)]
    reqs += [req(f"cut{s}", "a", n=12, seed=s, **hot, **setting) for s in range(4)]
    with Engine([str(tiny)], opts(n_parallel=8)) as e:
        got = texts(e, *reqs)
    greedy = expected_greedy("a", 12)
    assert all(got[f"cut{s}"] == greedy for s in range(4))
    assert any(got[f"plain{s}"] != greedy for s in range(4))


def test_extra_samplers_keep_requests_off_the_device(tiny: Path) -> None:
    assert on_device(SamplingParams(temperature=0.0), 0) is not None
    extras: tuple[dict[str, Any], ...] = (
        {"logit_bias": [(1, 2.0)]},
        {"dry_multiplier": 0.8},
        {"xtc_probability": 0.5},
        {"top_n_sigma": 1.0},
        {"mirostat": 2},
    )
    for extra in extras:
        assert on_device(SamplingParams(temperature=0.0, **extra), 0) is None, extra
    # Off or moot values keep the device chain.
    moot = SamplingParams(temperature=0.0, xtc_probability=0.5, xtc_threshold=0.9, top_n_sigma=-1)
    assert on_device(moot, 0) is not None
    # Where the model samples on the device, such a request falls back to a host chain.
    with Engine([str(tiny)], opts(device_sampling="on")) as e:
        forced = req("f", "a", logit_bias=[(X, 100.0)])
        chain = e.chains.sampler(0, forced)
        assert not isinstance(chain, DeviceChain)
        chain.close()
        assert texts(e, forced)["f"] == "xxxxxx"
