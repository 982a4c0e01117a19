"""The thinking budget as each client says it (api/thinkbudget.py, the options, the
converters): one number, with a clear 400 for what cannot be one."""

from __future__ import annotations

from typing import Any

import pytest

from localllm.api.thinkbudget import EFFORTS, LEVELS, MAX_THINK_BUDGET, effective_budget
from localllm.compat.anthropic.request import messages_request_to_native
from localllm.compat.openai.request import chat_request_to_native
from localllm.compat.responses.request import responses_request_to_native
from localllm.errors import InvalidRequest
from localllm.inference.options import resolve_options
from localllm.modelfile.parser import parse as parse_modelfile

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
MESSAGES = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}


def budget(
    request: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    level: str | None = None,
) -> int:
    values = resolve_options(model, request).values
    return effective_budget(values, request, level)


def test_the_option_model_parameter_and_level() -> None:
    assert budget() == -1  # no limit unless asked
    assert budget({"think_budget": 0}) == 0
    assert budget({"think_budget": 512.0}) == 512  # a JSON number that is whole
    assert budget(level="low") == LEVELS["low"] == 1024
    assert budget(level="max") == -1
    # The request's own count beats its level, which beats the model's parameter.
    assert budget({"think_budget": 7}, {"think_budget": "100"}, "high") == 7
    assert budget(None, {"think_budget": "100"}, "medium") == 8192
    assert budget(None, {"think_budget": "100"}) == 100


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (-2, "between -1 (no limit) and"),
        (-100, "between -1"),
        (MAX_THINK_BUDGET + 1, f"and {MAX_THINK_BUDGET}"),
        (2**40, "between"),
        (1.5, "must be an integer"),
        ("100", "must be of type integer"),
        (True, "must be of type integer"),
        (float("inf"), "finite"),
    ],
)
def test_bad_budgets_are_a_400(value: Any, words: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        resolve_options(None, {"think_budget": value})
    assert words in info.value.message and "think_budget" in info.value.message


def test_the_message_is_text_of_a_sane_length() -> None:
    r = resolve_options(None, {"think_budget": 5, "think_budget_message": "Time is up."})
    assert r.values["think_budget_message"] == "Time is up."
    for bad in (5, "x" * 5000):
        with pytest.raises(InvalidRequest, match="think_budget_message"):
            resolve_options(None, {"think_budget_message": bad})


def test_modelfile_parameters() -> None:
    mf = parse_modelfile(
        'FROM m\nPARAMETER think_budget 2048\nPARAMETER think_budget_message "Answer now."\n'
    )
    assert mf.parameters == {"think_budget": 2048, "think_budget_message": "Answer now."}
    for bad in (
        "PARAMETER think_budget 1.5",
        "PARAMETER think_budget -3",
        "PARAMETER think_budget lots",
    ):
        with pytest.raises(Exception, match="think_budget"):
            parse_modelfile(f"FROM m\n{bad}\n")


# -- OpenAI ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("effort", "think", "want"),
    [
        ("none", False, -1),
        ("minimal", "low", 256),
        ("low", "low", 1024),
        ("medium", "medium", 8192),
        ("high", "high", 24576),
        ("xhigh", "high", -1),
        ("max", "max", -1),
    ],
)
def test_reasoning_effort_maps_to_a_level_and_a_budget(effort: str, think: Any, want: int) -> None:
    for body in ({"reasoning_effort": effort}, {"reasoning": {"effort": effort}}):
        native = chat_request_to_native({**CHAT, **body}).native
        assert native["think"] is think or native["think"] == think
        level = native["think"] if isinstance(native["think"], str) else None
        assert budget(native["options"], None, level) == want
    if effort != "none":
        assert EFFORTS[effort] == want
    if effort == "max":
        return  # ours on Chat Completions (Ollama's level), not a Responses effort
    responses = responses_request_to_native(
        {"model": "m", "input": "Hi", "reasoning": {"effort": effort}}
    ).native
    assert responses["think"] == native["think"]
    assert responses["options"].get("think_budget") == native["options"].get("think_budget")


def test_an_explicit_budget_wins_over_the_effort() -> None:
    native = chat_request_to_native(
        {**CHAT, "reasoning_effort": "minimal", "options": {"think_budget": 5}}
    ).native
    assert budget(native["options"], None, native["think"]) == 5
    # llama-server's own fields.
    native = chat_request_to_native(
        {
            **CHAT,
            "reasoning_effort": "high",
            "reasoning_budget_tokens": 64,
            "reasoning_budget_message": "Done.",
        }
    ).native
    assert native["options"]["think_budget"] == 64
    assert native["options"]["think_budget_message"] == "Done."
    assert budget(native["options"], None, native["think"]) == 64
    native = chat_request_to_native({**CHAT, "thinking_budget_tokens": 0}).native
    assert native["options"]["think_budget"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"reasoning_effort": "extreme"},
        {"reasoning_budget_tokens": -2},
        {"reasoning_budget_tokens": 1.5},
        {"thinking_budget_tokens": "9"},
        {"reasoning_budget_tokens": MAX_THINK_BUDGET + 1},
        {"reasoning_budget_message": 3},
    ],
)
def test_bad_openai_fields_are_a_400(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        chat_request_to_native({**CHAT, **body})


# -- Anthropic -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -1, 1, 1024, MAX_THINK_BUDGET])
def test_anthropic_budget_tokens(n: int) -> None:
    native = messages_request_to_native(
        {**MESSAGES, "thinking": {"type": "enabled", "budget_tokens": n}}
    ).native
    assert native["think"] is True and native["options"]["think_budget"] == n
    assert budget(native["options"]) == n
    # Disabled or adaptive: no budget, whatever budget_tokens says.
    for kind in ("disabled", "adaptive"):
        native = messages_request_to_native(
            {**MESSAGES, "thinking": {"type": kind, "budget_tokens": n}}
        ).native
        assert "think_budget" not in native["options"]


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (-2, "between -1"),
        (MAX_THINK_BUDGET + 1, "between -1"),
        (2.5, "an integer"),
        ("1024", "an integer"),
        (True, "an integer"),
    ],
)
def test_bad_anthropic_budgets_are_a_400(n: Any, words: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        messages_request_to_native(
            {**MESSAGES, "thinking": {"type": "enabled", "budget_tokens": n}}
        )
    assert "thinking.budget_tokens" in info.value.message and words in info.value.message
