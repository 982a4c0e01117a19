"""LoRA adapters in the engine: per-request sets, one set per decode step, refusals.

The remap adapters (``tests/support/tinylora.py``) move the tiny model's
successor of "a": with ``TO_C`` the greedy text after "a" is "cdef…z", with
``TO_D`` "def…z", and without an adapter it stays "bcd…z".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.engine.adapters import QUANTUM, Adapters
from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run, run_one
from tests.support.tinylora import make_remap_lora, make_tiny_lora
from tests.support.tinymodel import LETTERS

BASE = LETTERS[1:]  # after "a": b..z
TO_C = LETTERS[2:]
TO_D = LETTERS[3:]


@pytest.fixture(scope="module")
def loras(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("loras")
    return {
        "c": make_remap_lora(d, {"a": "c"}, name="to_c.gguf"),
        "d": make_remap_lora(d, {"a": "d"}, name="to_d.gguf"),
        "shape": make_remap_lora(d, {"a": "c"}, name="shape.gguf", n_embd=128),
        "arch": make_tiny_lora(d, arch="qwen2", name="qwen.gguf"),
        "model": Path(d / "not-there.gguf"),
    }


@pytest.fixture
def eng4(tiny: Path) -> Iterator[Engine]:
    with Engine([str(tiny)], opts(n_parallel=4)) as e:
        yield e


def req(rid: str, prompt: str = "a", *adapters: Path, n: int = -1) -> CompletionRequest:
    return CompletionRequest(
        id=rid,
        prompt=prompt,
        sampling=SamplingParams(temperature=0),
        num_predict=n,
        adapters=[str(p) for p in adapters],
    )


def test_adapter_changes_greedy_text_and_base_is_untouched(
    eng4: Engine, loras: dict[str, Path]
) -> None:
    # Alternating, one at a time: each answer is exact, the adapter file is loaded once.
    for i in range(3):
        assert run_one(eng4, req(f"b{i}")).text == BASE
        assert run_one(eng4, req(f"c{i}", "a", loras["c"])).text == TO_C
        assert run_one(eng4, req(f"d{i}", "a", loras["d"])).text == TO_D
    assert sorted(p for p, _ in eng4.adapters.take_loads()) == sorted(
        [str(loras["c"]), str(loras["d"])]
    )
    assert eng4.adapters.take_loads() == []
    # Other tokens keep their successors under the adapter.
    assert run_one(eng4, req("x", "x", loras["c"])).text == "yz"


def test_mixed_sets_in_flight_each_get_their_own_adapters(
    eng4: Engine, loras: dict[str, Path]
) -> None:
    reqs = [
        req("b", "a"),
        req("c", "a", loras["c"]),
        req("d", "a", loras["d"]),
        req("c2", "a", loras["c"]),
    ]
    out = run(eng4, *reqs)
    assert {k: v.text for k, v in out.items()} == {"b": BASE, "c": TO_C, "d": TO_D, "c2": TO_C}
    assert all(r.done is not None and r.done.reason == "stop" for r in out.values())
    # Three sets took turns: more switches than sets, but far fewer than steps.
    assert 3 <= eng4.adapters.switches <= 3 * len(TO_C)


def test_two_adapters_at_once_stack(eng4: Engine, loras: dict[str, Path]) -> None:
    # c and d each add twice the base logit to their token and take it from "b": a tie
    # between c and d broken by the lower id, and in any case neither "b" nor the base text.
    text = run_one(eng4, req("cd", "a", loras["c"], loras["d"], n=1)).text
    assert text in ("c", "d")


def test_prefix_cache_is_not_shared_across_adapter_sets(
    eng4: Engine, loras: dict[str, Path]
) -> None:
    prompt = "hello hello hello"
    first = run_one(eng4, req("p1", prompt, n=2))
    again = run_one(eng4, req("p2", prompt, n=2))
    assert first.done is not None and again.done is not None
    assert again.done.cached_tokens > 0  # same (empty) set: the prefix is reused
    # With n_parallel=4 a free slot holds that prefix; under an adapter it must not count.
    other = run_one(eng4, req("p3", prompt, loras["c"], n=2))
    assert other.done is not None and other.done.cached_tokens == 0
    same = run_one(eng4, req("p4", prompt, loras["c"], n=2))
    assert same.done is not None and same.done.cached_tokens > 0


@pytest.mark.parametrize(
    ("which", "words"),
    [
        ("shape", "has incorrect shape"),
        ("arch", "arch mismatch"),
        ("model", "does not fit this model"),
    ],
)
def test_mismatched_adapter_fails_the_request_only(
    eng4: Engine, loras: dict[str, Path], which: str, words: str
) -> None:
    out = run(eng4, req("bad", "a", loras[which]), req("ok", "a", loras["c"]))
    failed = out["bad"].failed
    assert failed is not None and failed.status == 400
    assert "does not fit this model" in failed.message and words in failed.message
    assert out["ok"].text == TO_C
    # Refused again from the cache of refusals, with the same message.
    again = run_one(eng4, req("bad2", "a", loras[which])).failed
    assert again is not None and again.message == failed.message


def test_embed_after_adapter_uses_the_base(tiny: Path, loras: dict[str, Path]) -> None:
    with Engine([str(tiny)], opts(n_parallel=2, embedding=True)) as e:
        base, _ = e.embed(["abc"])
        assert run_one(e, req("c", "a", loras["c"], n=1)).text == "c"
        assert e.adapters.applied == (str(loras["c"]),)
        again, _ = e.embed(["abc"])
        assert e.adapters.applied == ()
        assert again[0] == pytest.approx(base[0])


class _Fake:
    handle = None


def test_choose_keeps_the_applied_set_for_a_quantum_then_serves_the_oldest() -> None:
    ad = Adapters(_Fake(), _Fake())  # type: ignore[arg-type]
    a, b = ("a.gguf",), ("b.gguf",)
    assert ad.choose([]) is None
    assert ad.choose([((), 5)]) == ()
    ad.applied, ad._run = a, 1
    # The applied set keeps the context while its run is shorter than the quantum.
    assert ad.choose([(a, 9), (b, 1)]) == a
    ad._run = QUANTUM
    assert ad.choose([(a, 9), (b, 1)]) == b
    # Alone it keeps going whatever its run.
    assert ad.choose([(a, 9)]) == a
    # Among waiting sets, the one whose slot advanced least recently goes first.
    assert ad.choose([(a, 9), (b, 4), ((), 2)]) == ()
