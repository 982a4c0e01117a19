"""Speculation options: the mode's defaults, draft_max over draft_num_predict, ranges, and the
default mode following the model's draft model (api/speculation.py through resolve_options)."""

from __future__ import annotations

import pytest

from localllm.api.speculation import Speculation, require_draft
from localllm.errors import InvalidRequest
from localllm.inference.options import resolve_options
from localllm.modelfile.parser import parse


def spec(
    params: dict[str, object] | None = None,
    request: dict[str, object] | None = None,
    *,
    has_draft: bool = False,
) -> Speculation:
    return resolve_options(params, request, has_draft=has_draft).speculation


def test_unset_speculation_follows_the_model() -> None:
    assert spec() == Speculation("auto", 16, 0, 0.0)
    assert spec(None, {"speculative": "off"}) == Speculation("off", 0, 0, 0.0)
    assert spec({"speculative": "off"}, {"speculative": "auto"}) == Speculation("auto", 16, 0, 0.0)
    assert spec(has_draft=True) == Speculation("draft", 16, 0, 0.75)
    assert spec(None, {"speculative": "off"}, has_draft=True) == Speculation()
    assert spec({"speculative": "off"}, None, has_draft=True) == Speculation()
    assert spec({"speculative": "off"}, {"speculative": "draft"}, has_draft=True).mode == "draft"
    assert spec(None, {"speculative": "ngram"}, has_draft=True) == Speculation("ngram", 16, 0, 0.0)


def test_draft_max_wins_over_its_older_name() -> None:
    ngram = {"speculative": "ngram"}
    assert spec(None, {**ngram, "draft_num_predict": 6}).tokens == 6
    assert spec(None, {**ngram, "draft_num_predict": 6, "draft_max": 3}).tokens == 3
    assert spec({"draft_max": 3}, {**ngram, "draft_num_predict": 6}).tokens == 3
    assert spec(None, {**ngram, "draft_max": 0, "draft_num_predict": 0}).tokens == 16
    assert spec(None, {"draft_max": 4}, has_draft=True).tokens == 4


def test_draft_min_and_p_min() -> None:
    got = spec({"draft_min": "2", "draft_p_min": "0.5"}, None, has_draft=True)
    assert (got.min, got.p_min) == (2, 0.5)
    assert spec(None, {"draft_p_min": 0}, has_draft=True).p_min == 0.0  # 0 is a value
    # As llama-server: a minimum above the maximum is the maximum.
    assert spec(None, {"draft_min": 10, "draft_max": 4}, has_draft=True).min == 4


@pytest.mark.parametrize(
    ("opts", "text"),
    [
        ({"draft_p_min": 1.5}, 'option "draft_p_min" must be between 0 and 1, got 1.5'),
        ({"draft_p_min": -0.1}, 'option "draft_p_min" must be between 0 and 1'),
        ({"draft_min": -1}, 'option "draft_min" must be >= 0'),
        ({"draft_max": -1}, 'option "draft_max" must be >= 0'),
        ({"draft_num_predict": -1}, 'option "draft_num_predict" must be >= 0'),
        # One request filled each step's 2,048-row batch with its drafts.
        ({"draft_max": 2048}, 'option "draft_max" must be between 0 and 64, got 2048'),
        ({"draft_max": 65}, 'option "draft_max" must be between 0 and 64, got 65'),
        ({"draft_num_predict": 1000}, 'option "draft_num_predict" must be between 0 and 64'),
        ({"draft_min": 2048}, 'option "draft_min" must be between 0 and 64, got 2048'),
        (
            {"num_batch": 32, "draft_max": 40},
            'option "draft_max" must be between 0 and 31 with num_batch 32, got 40',
        ),
        (
            {"speculative": "eagle"},
            'option "speculative" must be "off", "auto", "ngram" or "draft"',
        ),
        ({"draft_p_min": "high"}, 'option "draft_p_min" must be of type float32'),
    ],
)
def test_bad_values_are_400(opts: dict[str, object], text: str) -> None:
    with pytest.raises(InvalidRequest, match=text.replace("(", r"\(")) as info:
        resolve_options(None, opts)
    assert info.value.status == 400


def test_drafts_fit_in_a_micro_batch_beside_the_token() -> None:
    assert spec(None, {"speculative": "ngram", "draft_max": 64}).tokens == 64
    assert spec(None, {"draft_max": 64, "draft_min": 64}, has_draft=True).min == 64
    assert spec({"draft_max": 64}, None, has_draft=True).tokens == 64
    with pytest.raises(InvalidRequest, match='"draft_max" must be between 0 and 64'):
        resolve_options({"draft_max": 100}, None)  # a Modelfile PARAMETER too
    assert spec(None, {"num_batch": 32, "draft_max": 31}).tokens == 31
    # A mode's default (16) is cut to a small num_batch rather than refused.
    assert spec(None, {"num_batch": 8}, has_draft=True) == Speculation("draft", 7, 0, 0.75)
    assert spec(None, {"num_batch": 1}).tokens == 0


def test_draft_without_a_draft_model_is_400() -> None:
    require_draft(spec(None, {"speculative": "draft"}), has_draft=True, model="m")
    with pytest.raises(InvalidRequest) as info:
        require_draft(spec(None, {"speculative": "draft"}), has_draft=False, model="m")
    assert str(info.value) == 'model "m" has no draft model (add a DRAFT line to its Modelfile)'
    require_draft(spec(), has_draft=False, model="m")


def test_modelfile_parameters() -> None:
    mf = parse(
        "FROM x\nPARAMETER draft_max 4\nPARAMETER draft_min 1\n"
        "PARAMETER draft_p_min 0.6\nPARAMETER speculative draft\n"
    )
    assert mf.parameters == {
        "draft_max": 4,
        "draft_min": 1,
        "draft_p_min": 0.6,
        "speculative": "draft",
    }
    with pytest.raises(InvalidRequest, match=r"line 2, .*draft_p_min"):
        parse("FROM x\nPARAMETER draft_p_min 2\n")
