"""Sampling on the device picks what the host sampler picks (engine/device_sampling.py).

Every test runs the same requests through two engines on the real libllama, one
sampling on the host (``device_sampling="off"``) and one in the decode's graph
(``"on"``: the CPU backend here, the code path a GPU takes), and compares tokens.
Sampled chains run on the dense random model (tests/support/densemodel.py), whose
logits never tie, so the two samplers have no tie to break differently.  Its
vocabulary is 340 tokens: the device's float cumulative sums stay close enough to
the host's double ones that no seeded draw here moves; over a 128k vocabulary with
no top-k cut some would (the module under test says how many, and why).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localllm.engine.device_sampling import on_device, wanted
from localllm.engine.engine import Engine
from localllm.engine.sampling import DeviceChain, Sampler
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.densemodel import make_dense_model
from tests.support.engine_steps import Result, opts, run
from tests.support.tinymodel import LETTERS, expected_greedy


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dense_model(tmp_path_factory.mktemp("dense"))


def both(
    model: Path, reqs: list[CompletionRequest], **kw: object
) -> tuple[dict[str, Result], dict[str, Result]]:
    """The requests' results sampling on the host, then on the device."""
    out = []
    for mode in ("off", "on"):
        with Engine([str(model)], opts(device_sampling=mode, **kw)) as e:
            out.append(run(e, *reqs))
            if mode == "on":
                assert e.chains.attaches > 0  # the device did sample
    return out[0], out[1]


def tokens(results: dict[str, Result]) -> dict[str, list[int]]:
    out = {}
    for k, r in results.items():
        assert r.done is not None, r.failed
        out[k] = r.done.context
    return out


def req(id: str, prompt: str, n: int = 48, logprobs: int = 0, **sampling: Any) -> CompletionRequest:
    return CompletionRequest(
        id=id, prompt=prompt, num_predict=n, logprobs=logprobs, sampling=SamplingParams(**sampling)
    )


# Chains the device runs, each as the host defines it (native/shim.c).
CHAINS: dict[str, dict[str, Any]] = {
    "ollama": {"temperature": 0.8, "top_k": 40, "top_p": 0.9},  # Ollama's defaults
    "top_k only": {"temperature": 1.0, "top_k": 20, "top_p": 1.0},  # needs ll-best-first
    "dist only": {"temperature": 1.3, "top_k": 0, "top_p": 1.0},
    "top_p": {"temperature": 1.0, "top_k": 0, "top_p": 0.95},
    "min_p": {"temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.02},
    "all": {"temperature": 0.7, "top_k": 64, "top_p": 0.97, "min_p": 0.01},
}


def test_greedy_text_is_identical(tiny_attn: Path, dense: Path) -> None:
    prompts = ["hello", "a", "x", "0", "."]
    reqs = [req(f"g{i}", p, n=-1, temperature=0.0) for i, p in enumerate(prompts)]
    host, device = both(tiny_attn, reqs, n_parallel=3)
    for i, p in enumerate(prompts):
        assert device[f"g{i}"].text == host[f"g{i}"].text == expected_greedy(p)
    reqs = [req(f"d{i}", p, n=64, temperature=0.0) for i, p in enumerate(prompts)]
    host, device = both(dense, reqs, n_parallel=3)
    assert tokens(device) == tokens(host)


def test_fixed_seed_draws_what_the_host_draws(dense: Path) -> None:
    # All chains at once: four slots sample in the same decodes, each its own chain.
    reqs = [
        req(name, "the quick brown fox", n=64, seed=11 + i, **chain)
        for i, (name, chain) in enumerate(CHAINS.items())
    ]
    host, device = both(dense, reqs, n_parallel=4)
    got, want = tokens(device), tokens(host)
    assert got == want
    generated = [t for r in reqs for t in want[r.id][len("the quick brown fox") + 1 :]]
    assert len(set(generated)) > 40  # the draws spread: a real test of the draws


def test_prompts_split_over_micro_batches_keep_the_draws(dense: Path) -> None:
    # A 200-token prompt in micro-batches of 32 while another slot samples: the device
    # draws a seeded number only for the rows it samples, as the host does.
    long = (LETTERS * 8)[:200]
    reqs = [
        req("long", long, n=32, seed=5, **CHAINS["ollama"]),
        req("short", "abc", n=64, seed=6, **CHAINS["min_p"]),
    ]
    host, device = both(dense, reqs, n_parallel=2, n_batch=256, n_ubatch=32)
    assert tokens(device) == tokens(host)


def test_logprobs_come_from_the_host_and_match(dense: Path) -> None:
    # A request that wants logprobs samples on the host next to device-sampled slots
    # (the decode then copies every row's logits): same tokens and logprobs.
    reqs = [
        req("lp", "hello", n=24, logprobs=3, temperature=0.0),
        req("lps", "world", n=24, logprobs=2, seed=3, **CHAINS["ollama"]),
        req("dev", "fox", n=24, seed=4, **CHAINS["all"]),
    ]
    host, device = both(dense, reqs, n_parallel=3)
    assert tokens(device) == tokens(host)
    for id in ("lp", "lps"):
        a, b = host[id].pieces, device[id].pieces
        assert [p.logprob for p in a] == [p.logprob for p in b]
        assert [p.top_logprobs for p in a] == [p.top_logprobs for p in b]
        assert all(p.logprob is not None for p in b)


def test_host_only_chains_keep_the_host_sampler(dense: Path) -> None:
    host_only = [
        SamplingParams(repeat_penalty=1.1),
        SamplingParams(presence_penalty=0.5),
        SamplingParams(typical_p=0.9),
        SamplingParams(grammar='root ::= "a"+'),
    ]
    for p in host_only:
        assert on_device(p, 0) is None
    assert on_device(SamplingParams(), 1) is None  # logprobs
    assert on_device(SamplingParams(repeat_penalty=1.1, repeat_last_n=0), 0) is not None
    assert on_device(SamplingParams(temperature=0.0, top_k=7), 0) == on_device(
        SamplingParams(temperature=0.0, seed=9), 0
    )  # greedy: one chain
    reqs = [
        req("pen", "hello", n=32, seed=1, repeat_penalty=1.3, **CHAINS["ollama"]),
        req("gram", "hi", n=8, temperature=0.0, grammar="root ::= [a-c]+"),
        req("dev", "fox", n=32, seed=2, **CHAINS["top_p"]),
    ]  # beside them, on the device
    host, device = both(dense, reqs, n_parallel=3)
    assert tokens(device) == tokens(host)


def test_a_slot_keeps_its_chain_while_the_settings_stay(dense: Path) -> None:
    seeded = CHAINS["ollama"] | {"seed": 42}
    with Engine([str(dense)], opts(device_sampling="on")) as e:
        first = run(e, req("a", "hello", n=32, **seeded))["a"]
        assert e.chains.attaches == 1
        again = run(e, req("b", "hello", n=32, **seeded))["b"]  # reset, not re-attached
        assert e.chains.attaches == 1
        assert again.done is not None and first.done is not None
        assert again.done.context == first.done.context  # the seed starts over
        run(e, req("c", "hello", n=8, temperature=0.0))  # other settings: a new chain
        assert e.chains.attaches == 2
        lp = run(e, req("d", "hello", n=8, logprobs=1, temperature=0.0))["d"]
        assert lp.pieces[0].logprob is not None  # host: the slot's chain was detached
        run(e, req("e", "hello", n=8, temperature=0.0))
        assert e.chains.attaches == 3


def test_samplers_by_request(dense: Path) -> None:
    with Engine([str(dense)], opts(device_sampling="on", n_parallel=2)) as e:
        a = e.chains.sampler(0, req("a", "x", temperature=0.0))
        b = e.chains.sampler(1, req("b", "x", logprobs=1, temperature=0.0))
        assert isinstance(a, DeviceChain) and not isinstance(b, DeviceChain)
        assert isinstance(b, Sampler)
        a.close()
        b.close()
    with Engine([str(dense)], opts(device_sampling="off")) as e:
        c = e.chains.sampler(0, req("c", "x", temperature=0.0))
        assert not isinstance(c, DeviceChain)
        c.close()


def test_speculation_verifies_device_drafts_the_same(tiny_attn: Path, dense: Path) -> None:
    prompt = LETTERS * 3 + "abc"  # n-gram lookup finds the alphabet again and drafts it
    reqs = [
        req("spec", prompt, n=40, temperature=0.0),
        req("spec-seed", prompt, n=40, seed=8, **CHAINS["top_k only"]),
    ]
    for r in reqs:
        r.draft_tokens, r.draft_mode = 6, "ngram"
    for model in (tiny_attn, dense):
        host, device = both(model, reqs, n_parallel=2)
        assert tokens(device) == tokens(host)
        for id in ("spec", "spec-seed"):
            a, b = host[id].done, device[id].done
            assert a is not None and b is not None
            assert (b.drafted, b.accepted) == (a.drafted, a.accepted)
            if model == tiny_attn:  # the alphabet again: drafts, and greedy takes them
                assert b.drafted > 0 and (b.accepted > 0 or id == "spec-seed")


def test_auto_means_a_gpu_holds_the_output_layer() -> None:
    gpu_log = "load_tensors: offloading output layer to GPU\nload_tensors: offloaded 9/9 layers"
    assert wanted(opts(), gpu_log)
    assert not wanted(opts(), "load_tensors: CPU_Mapped model buffer size = 10 MiB")
    assert wanted(opts(device_sampling="on"), "")
    assert not wanted(opts(device_sampling="off"), gpu_log)
    assert not wanted(opts(embedding=True), gpu_log)
