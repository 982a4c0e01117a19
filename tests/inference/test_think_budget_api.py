"""The thinking budget end to end: the real daemon, the real ollama, openai and anthropic SDKs.

Models (tests/support/scriptmodel.py):

* ``thinker``: its template opens ``<think>`` (as DeepSeek-R1's and Qwen3's do), and it
  reasons for ``STEPS`` tokens, more than the ``low`` level's 1024, then answers;
* ``opener``: its template opens nothing; its reply opens the block itself;
* ``capped``: ``thinker`` with ``PARAMETER think_budget 5`` (created with the ollama SDK).

With a budget of N the reply holds N reasoning tokens, the forced end marker (one
token) and the same answer: so ``eval_count`` is N more than with a budget of 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import pytest

from localllm import paths
from localllm.api.thinkbudget import EFFORTS, LEVELS
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, module_home, start_daemon
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model
from tests.support.variants import openai_client

pytestmark = pytest.mark.slow  # long replies, through every SDK

STEPS = 1300
REASON = " ".join(f"s{i}" for i in range(STEPS))  # cut into pieces of up to 6 characters
ANSWER = "The answer is 42."
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
)
OPENS = CHATML + "<think>\n{% endif %}"
PLAIN = CHATML + "{% endif %}"
ASK: Any = [{"role": "user", "content": "Why?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_home(
        tmp_path_factory, "think-budget", LOCALLLM_NUM_PARALLEL="2", LOCALLLM_CONTEXT_LENGTH="4096"
    ) as tmp:
        store = Store(paths.models())
        thinker = make_script_model(
            tmp / "thinker",
            {"<|im_start|>assistant\n<think>\n": f"{REASON}</think>\n\n{ANSWER}"},
            control=["</think>"],
            eos="<|im_end|>",
            chat_template=OPENS,
            context=4096,
        )
        import_gguf(store, parse_name("thinker"), [thinker])
        opener = make_script_model(
            tmp / "opener",
            {"<|im_start|>assistant\n": f"<think>{REASON[:200]}</think>{ANSWER}"},
            control=["<think>", "</think>"],
            eos="<|im_end|>",
            chat_template=PLAIN,
        )
        import_gguf(store, parse_name("opener"), [opener])
        with start_daemon(tmp) as daemon:
            yield daemon


def oll(d: Daemon) -> ollama.Client:
    return d.keep(ollama.Client(host=d.url, trust_env=False, timeout=120))


def chat(d: Daemon, model: str = "thinker", **kw: Any) -> Any:
    options = {**GREEDY, **kw.pop("options", {})}
    return oll(d).chat(model=model, messages=ASK, options=options, **kw)


def reasoned(thinking: str | None, n: int) -> None:
    """``thinking`` is the reasoning's first ``n`` tokens (the counts are checked with
    ``eval_count``; the script's pieces are 1 to 6 characters, and trailing whitespace
    is trimmed)."""
    text = thinking or ""
    assert REASON.startswith(text) and n - 1 <= len(text) <= 6 * n, (n, text[-40:])


# -- Ollama ----------------------------------------------------------------------------


def test_ollama_think_budget_option(d: Daemon) -> None:
    whole = chat(d, think=True)
    assert whole.message.thinking == REASON and whole.message.content == ANSWER
    assert chat(d, think=True, options={"think_budget": -1}).eval_count == whole.eval_count
    none = chat(d, think=True, options={"think_budget": 0})
    assert not none.message.thinking and none.message.content == ANSWER
    for n in (1, 40):
        cut = chat(d, think=True, options={"think_budget": n})
        assert cut.message.content == ANSWER
        assert cut.eval_count == none.eval_count + n
        reasoned(cut.message.thinking, n)


def test_ollama_think_budget_streams_the_close(d: Daemon) -> None:
    parts = list(
        oll(d).chat(
            model="thinker",
            messages=ASK,
            think=True,
            stream=True,
            options={**GREEDY, "think_budget": 10},
        )
    )
    thinking = "".join(p.message.thinking or "" for p in parts)
    content = "".join(p.message.content or "" for p in parts)
    reasoned(thinking, 10)
    assert content == ANSWER and parts[-1].done


def test_ollama_think_levels_are_budgets(d: Daemon) -> None:
    none = chat(d, think=True, options={"think_budget": 0})
    low = chat(d, think="low")
    assert low.eval_count == none.eval_count + LEVELS["low"]
    reasoned(low.message.thinking, LEVELS["low"])
    # An exact count wins over the level; a high level is more than this reasoning.
    assert chat(d, think="low", options={"think_budget": 3}).eval_count == none.eval_count + 3
    assert chat(d, think="high").message.thinking == REASON


def test_generate_takes_the_budget_too(d: Daemon) -> None:
    r = oll(d).generate(
        model="thinker", prompt="Why?", think=True, options={**GREEDY, "think_budget": 4}
    )
    reasoned(r.thinking, 4)
    assert r.response == ANSWER


def test_modelfile_parameter(d: Daemon) -> None:
    oll(d).create(model="capped", from_="thinker", parameters={"think_budget": 5})
    none = chat(d, think=True, options={"think_budget": 0})
    assert chat(d, "capped", think=True).eval_count == none.eval_count + 5
    # The request's own budget still wins over the model's.
    assert chat(d, "capped", think=True, options={"think_budget": -1}).message.thinking == REASON


def test_the_message_goes_before_the_end_marker(d: Daemon) -> None:
    r = chat(d, think=True, options={"think_budget": 3, "think_budget_message": "|Enough.|"})
    assert r.message.thinking is not None and r.message.thinking.endswith("|Enough.|")
    assert r.message.content == ANSWER


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"think_budget": -2}, "between -1"),
        ({"think_budget": 10**9}, "between -1"),
        ({"think_budget": 2.5}, "integer"),
        ({"think_budget": "7"}, "integer"),
        ({"think_budget_message": "x" * 5000}, "at most"),
    ],
)
def test_ollama_bad_budgets_are_a_400(d: Daemon, options: dict[str, Any], words: str) -> None:
    with pytest.raises(ollama.ResponseError) as info:
        chat(d, think=True, options=options)
    assert info.value.status_code == 400 and words in str(info.value.error)
    with pytest.raises(ollama.ResponseError):
        chat(d, think="lots")
    assert chat(d, think=True, options={"think_budget": 0}).message.content == ANSWER


# -- OpenAI ----------------------------------------------------------------------------


def test_openai_reasoning_effort(d: Daemon) -> None:
    c = openai_client(d)
    counts = {}
    for effort in ("minimal", "low"):
        r = c.chat.completions.create(
            model="thinker", messages=ASK, reasoning_effort=effort, temperature=0
        )
        msg = r.choices[0].message
        assert msg.content == ANSWER
        reasoned((msg.model_extra or {}).get("reasoning"), EFFORTS[effort])
        assert r.usage is not None
        counts[effort] = r.usage.completion_tokens
    assert counts["low"] - counts["minimal"] == EFFORTS["low"] - EFFORTS["minimal"]
    # llama-server's exact count, streamed.
    chunks = list(
        c.chat.completions.create(
            model="thinker",
            messages=ASK,
            temperature=0,
            stream=True,
            extra_body={"reasoning_budget_tokens": 0},
        )
    )
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    assert not "".join((dl.model_extra or {}).get("reasoning") or "" for dl in deltas)
    assert "".join(dl.content or "" for dl in deltas) == ANSWER


def test_openai_responses_effort(d: Daemon) -> None:
    r = openai_client(d).responses.create(
        model="thinker", input="Why?", temperature=0, reasoning={"effort": "minimal"}
    )
    thinking = "".join(p.text for o in r.output if o.type == "reasoning" for p in o.summary)
    reasoned(thinking, EFFORTS["minimal"])
    assert r.output_text == ANSWER


@pytest.mark.parametrize(
    "body",
    [
        {"reasoning_effort": "extreme"},
        {"reasoning_budget_tokens": -5},
        {"reasoning_budget_tokens": 1.5},
    ],
)
def test_openai_bad_budgets_are_a_400(d: Daemon, body: dict[str, Any]) -> None:
    import openai

    with pytest.raises(openai.BadRequestError):
        openai_client(d).chat.completions.create(model="thinker", messages=ASK, extra_body=body)


# -- Anthropic -------------------------------------------------------------------------


def anthropic_client(d: Daemon) -> Any:
    import anthropic

    http = anthropic.DefaultHttpxClient(trust_env=False, timeout=120)
    return d.keep(
        anthropic.Anthropic(base_url=d.url, api_key="unused", max_retries=0, http_client=http)
    )


def thinking_of(msg: Any) -> tuple[str, str]:
    return (
        "".join(b.thinking for b in msg.content if b.type == "thinking"),
        "".join(b.text for b in msg.content if b.type == "text"),
    )


@pytest.mark.parametrize("model", ["thinker", "opener"])
def test_anthropic_budget_tokens(d: Daemon, model: str) -> None:
    c = anthropic_client(d)
    kw: Any = {
        "model": model,
        "max_tokens": 4000,
        "messages": ASK,
        "extra_body": {"temperature": 0},
    }
    whole = REASON if model == "thinker" else REASON[:200]
    assert thinking_of(
        c.messages.create(thinking={"type": "enabled", "budget_tokens": -1}, **kw)
    ) == (whole, ANSWER)
    none = c.messages.create(thinking={"type": "enabled", "budget_tokens": 0}, **kw)
    assert thinking_of(none) == ("", ANSWER)
    cut = c.messages.create(thinking={"type": "enabled", "budget_tokens": 7}, **kw)
    thinking, text = thinking_of(cut)
    reasoned(thinking, 7)
    assert text == ANSWER
    assert cut.usage.output_tokens == none.usage.output_tokens + 7
    with c.messages.stream(thinking={"type": "enabled", "budget_tokens": 7}, **kw) as s:
        assert thinking_of(s.get_final_message()) == (thinking, ANSWER)


@pytest.mark.parametrize("n", [-2, 10**9, 2.5, "1024"])
def test_anthropic_bad_budgets_are_a_400(d: Daemon, n: Any) -> None:
    import anthropic

    c = anthropic_client(d)
    with pytest.raises(anthropic.BadRequestError) as info:
        c.messages.create(
            model="thinker",
            max_tokens=64,
            messages=ASK,
            thinking={"type": "enabled", "budget_tokens": n},
        )
    assert "budget_tokens" in str(info.value)
    # The daemon keeps serving.
    r = httpx.get(d.url + "/health", timeout=10, trust_env=False)
    assert r.status_code == 200
