"""The script model (tests/support/scriptmodel.py) answers its scripts exactly through the
real engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run_one
from tests.support.scriptmodel import make_script_model, segment

CHATML_TAIL = "<|im_start|>assistant\n"
TOOL_TAIL = "</tool_response><|im_end|>\n" + CHATML_TAIL
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = "It is 21 °C and sunny in Paris."
FULLWIDTH = "<｜tool▁calls▁begin｜>x<｜tool▁calls▁end｜>"


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_script_model(
        tmp_path_factory.mktemp("script"),
        {
            CHATML_TAIL: CALL,
            TOOL_TAIL: ANSWER,
            "<|deepseek|>": FULLWIDTH,
            "<|mistral|>": '[TOOL_CALLS][{"name": "f", "arguments": {}}]',
        },
        control=["[TOOL_CALLS]"],
        eos="<|im_end|>",
    )


def _greedy(engine: Engine, prompt: str) -> str:
    r = run_one(
        engine, CompletionRequest(id="r", prompt=prompt, sampling=SamplingParams(temperature=0.0))
    )
    assert r.done is not None and r.done.reason == "stop"
    return r.text


def test_each_trigger_answers_its_script(script: Path) -> None:
    with Engine([str(script)], opts()) as e:
        assert _greedy(e, "<|im_start|>user\nhi<|im_end|>\n" + CHATML_TAIL) == CALL
        # The longer trigger wins: the second turn after a tool result.
        assert _greedy(e, "<tool_response>21</tool_response><|im_end|>\n" + CHATML_TAIL) == ANSWER
        assert _greedy(e, "<|deepseek|>") == FULLWIDTH
        assert _greedy(e, "no trigger here") == ""


def test_control_markers_are_control_tokens(script: Path) -> None:
    # Without special rendering the marker vanishes, as in a real Mistral GGUF.
    with Engine([str(script)], opts()) as e:
        assert _greedy(e, "<|mistral|>") == '[{"name": "f", "arguments": {}}]'
        (tok,) = e.tokenize("[TOOL_CALLS]", add_special=False)
        assert e.model.piece(tok) == b""


def test_segment_pieces_are_unique() -> None:
    taken: set[str] = set()
    text = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    pieces = segment(text, taken)
    assert "".join(pieces) == text and len(set(pieces)) == len(pieces)


def test_request_markers_render_control_tokens_as_text(script: Path) -> None:
    # The fix for real Mistral GGUFs: the format's markers reach the parser as text.
    with Engine([str(script)], opts()) as e:
        r = run_one(
            e,
            CompletionRequest(
                id="r",
                prompt="<|mistral|>",
                sampling=SamplingParams(temperature=0.0),
                markers=["[TOOL_CALLS]", "[ARGS]", "not one token"],
            ),
        )
        assert r.text == '[TOOL_CALLS][{"name": "f", "arguments": {}}]'
        assert e.model.marker_tokens(["[ARGS]", "[TOOL_CALLS]"]) == frozenset(
            e.tokenize("[TOOL_CALLS]", add_special=False)
        )


def test_repeated_control_markers_are_text_after_their_first_use(tmp_path: Path) -> None:
    # Harmony writes <|channel|> twice, GLM a "\n" between markers again and again; one
    # token has one successor, so such occurrences are ordinary pieces of the same text.
    marks = ["<|a|>", "<|b|>", "<|c|>", "<|d|>", "<|e|>"]
    text = "<|a|>x<|b|>\n<|c|>y<|d|>\n<|e|>z<|a|>w"
    path = make_script_model(tmp_path, {"<|go|>": text}, control=marks)
    with Engine([str(path)], opts()) as e:
        r = run_one(
            e,
            CompletionRequest(
                id="r", prompt="<|go|>", markers=marks, sampling=SamplingParams(temperature=0.0)
            ),
        )
        assert r.text == text
        # Unrendered, the control tokens vanish: every marker's first use but <|e|>'s,
        # which follows a second "\n" (no new piece: "\n<|e|>z..." is text).
        assert _greedy(e, "<|go|>") == "x\ny\n<|e|>z<|a|>w"
