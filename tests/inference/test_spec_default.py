"""Speculation's default through the daemon: unset, ``speculative`` is ``"auto"`` and
changes nothing but speed.

On the tiny model with attention (logprobs depend on the whole context), the
same greedy request without the option, with ``"off"``, ``"auto"`` and
``"ngram"`` gives the same text, the same tokens, and a first token with the
same logprobs; the final chunk's ``draft_count`` shows where the default
drafted: a prompt to copy from, yes; nothing to copy, or a sampled request, no.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.daemon import Daemon, own_daemon
from tests.support.models import add_tiny
from tests.support.tinymodel import LOOP_PROMPT, expected_greedy
from tests.support.variants import GREEDY_OPTS

COPY = "abcdefghijklmnop.abcd"  # drafts copied from the prompt agree
MISSES = "bc.cd.de.ef.fg.gh.hi.ij.jk.kl.a"  # drafts copied from the prompt all miss
MODES: tuple[str | None, ...] = (None, "off", "auto", "ngram")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """``tiny-attn`` (attention on) served with two slots, for tests that change nothing."""
    with own_daemon(
        tmp_path_factory,
        "spec-daemon",
        lambda tmp: add_tiny(tmp, "tiny-attn", attention=True),
        home="localllm-home",
        LOCALLLM_NUM_PARALLEL="2",
        LOCALLLM_CONTEXT_LENGTH="256",
        # The draft counts compared here are the text's rule's, not the step times' call.
        LOCALLLM_DRAFT_GATE="false",
    ) as d:
        yield d


def generate(d: Daemon, prompt: str, mode: str | None, **options: Any) -> dict[str, Any]:
    opts = {**GREEDY_OPTS, "num_predict": 40, **options}
    if mode is not None:
        opts["speculative"] = mode
    body = {
        "model": "tiny-attn",
        "prompt": prompt,
        "raw": True,
        "stream": False,
        "logprobs": True,
        "top_logprobs": 2,
        "options": opts,
    }
    r = httpx.post(d.url + "/api/generate", json=body, timeout=120, trust_env=False)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


@pytest.mark.parametrize("prompt", [COPY, MISSES, "hello", LOOP_PROMPT * 3])
def test_every_mode_gives_the_same_greedy_tokens(daemon: Daemon, prompt: str) -> None:
    # The first run evaluates the whole prompt; every later one reuses its cells and
    # evaluates the last token alone, whose logits differ from the first run's in the
    # last bits (a batch of one is summed in another order, as llama-server warns of
    # for cache_prompt).  So every mode runs from that same warm state.
    generate(daemon, prompt, "off")
    runs = {mode: generate(daemon, prompt, mode) for mode in MODES}
    plain = runs["off"]
    assert plain["response"] == expected_greedy(prompt, 40) and "draft_count" not in plain
    for mode, r in runs.items():
        assert r["response"] == plain["response"], mode
        assert r["eval_count"] == plain["eval_count"], mode
        assert [lp["token"] for lp in r["logprobs"]] == [lp["token"] for lp in plain["logprobs"]]
        # The first token comes from the prompt's logits, evaluated as without drafts.
        assert r["logprobs"][0] == plain["logprobs"][0], mode
    assert runs[None].get("draft_count") == runs["auto"].get("draft_count")


def test_unset_drafts_where_the_prompt_offers_a_copy(daemon: Daemon) -> None:
    copy = generate(daemon, COPY, None)
    assert 0 < copy["draft_accepted_count"] <= copy["draft_count"]
    # Nothing recurs in "hellopqrs...": the default drafts nothing, so reports nothing.
    assert "draft_count" not in generate(daemon, "hello", None)
    # Every draft misses: the default stops after a few, explicit lookup goes on.
    missed, ngram = generate(daemon, MISSES, None), generate(daemon, MISSES, "ngram")
    assert missed["draft_accepted_count"] == 0
    assert 0 < missed["draft_count"] < ngram["draft_count"]


def test_unset_never_drafts_for_a_sampled_request(daemon: Daemon) -> None:
    hot = {"temperature": 0.8, "seed": 5, "num_predict": 30}
    unset, ngram, off = (generate(daemon, COPY, m, **hot) for m in (None, "ngram", "off"))
    assert "draft_count" not in unset and ngram["draft_count"] > 0
    assert unset["response"] == ngram["response"] == off["response"]
