"""Tests for localllm.api.options: layering, Ollama's type errors, range checks, keep_alive."""

from __future__ import annotations

import logging
import math
import os
import re

import pytest

from localllm.api.options import machine_threads, parse_keep_alive
from localllm.errors import InvalidRequest
from localllm.inference.options import LoadFields, resolve_options
from localllm.runner.messages import LoadOptions, SamplingParams


def test_defaults_are_ollamas() -> None:
    r = resolve_options(None, None)
    assert r.sampling == SamplingParams()
    assert r.num_predict == -1 and r.stop == [] and r.num_keep == 4
    assert r.load == LoadFields(
        num_ctx=None, num_batch=512, num_gpu=-1, main_gpu=None, use_mmap=None, num_thread=0
    )


def test_layers_request_beats_model_beats_defaults() -> None:
    r = resolve_options(
        {"temperature": 0.2, "top_k": 10, "num_ctx": 8192},
        {"temperature": 0.5},
        defaults={"num_ctx": 4096, "top_p": 0.5},
    )
    assert r.sampling.temperature == 0.5
    assert r.sampling.top_k == 10
    assert r.sampling.top_p == 0.5
    assert r.load.num_ctx == 8192


def test_split_into_engine_types() -> None:
    r = resolve_options(
        None,
        {
            "seed": 42,
            "num_predict": 128,
            "stop": ["\n\n", "User:"],
            "num_keep": 8,
            "repeat_last_n": -1,
            "repeat_penalty": 1.1,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "min_p": 0.05,
            "typical_p": 0.9,
            "num_ctx": 2048,
            "num_batch": 256,
            "num_gpu": 0,
            "main_gpu": 1,
            "use_mmap": False,
            "num_thread": machine_threads(),
        },
    )
    s = r.sampling
    assert (s.seed, s.repeat_last_n, s.repeat_penalty, s.presence_penalty) == (42, -1, 1.1, 0.5)
    assert (s.frequency_penalty, s.min_p, s.typical_p) == (-0.5, 0.05, 0.9)
    assert s.grammar is None
    assert (r.num_predict, r.stop, r.num_keep) == (128, ["\n\n", "User:"], 8)
    assert r.load == LoadFields(2048, 256, 0, 1, False, machine_threads())
    lo = r.load.apply(LoadOptions(n_ubatch=512, n_threads=0))
    # num_batch is the micro-batch; a step still holds up to 2048 tokens.
    assert (lo.n_ctx, lo.n_batch, lo.n_ubatch, lo.n_gpu_layers) == (2048, 2048, 256, 0)
    assert (lo.main_gpu, lo.use_mmap, lo.n_threads) == (1, False, machine_threads())


def test_automatic_load_fields_keep_base() -> None:
    base = LoadOptions(n_ctx=4096, n_gpu_layers=33, use_mmap=True, n_threads=2)
    lo = resolve_options(None, None).load.apply(base)
    assert (lo.n_ctx, lo.n_gpu_layers, lo.use_mmap, lo.n_threads) == (4096, 33, True, 2)
    # Reload decision: two automatic requests compare equal, a changed num_ctx doesn't.
    assert resolve_options(None, {"seed": 1}).load == resolve_options(None, None).load
    assert resolve_options(None, {"num_ctx": 8192}).load != resolve_options(None, None).load


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("###", ["###"]),
        (["a", "b"], ["a", "b"]),
        (["a", ""], ["a"]),
        ([], []),
    ],
)
def test_stop_string_or_list(stop: object, expected: list[str]) -> None:
    assert resolve_options(None, {"stop": stop}).stop == expected


def test_integer_from_float_truncates_like_go() -> None:
    assert resolve_options(None, {"num_predict": 12.7}).num_predict == 12
    assert resolve_options(None, {"temperature": 1}).sampling.temperature == 1.0


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("num_ctx", "4096", "integer"),
        ("num_ctx", True, "integer"),
        ("top_k", [1], "integer"),
        ("temperature", "hot", "float32"),
        ("temperature", False, "float32"),
        ("use_mmap", 1, "boolean"),
        ("use_mmap", "true", "boolean"),
        ("stop", 5, "array"),
        ("stop", ["ok", 3], "array"),
    ],
)
def test_type_errors_have_ollamas_text(key: str, value: object, kind: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        resolve_options(None, {key: value})
    assert str(info.value) == f'option "{key}" must be of type {kind}'
    assert info.value.status == 400


@pytest.mark.parametrize(
    "opts",
    [
        {"num_ctx": 0},
        {"num_ctx": -5},
        {"num_ctx": 10_000_001},
        {"num_predict": -3},
        {"top_k": -1},
        {"temperature": -0.1},
        {"temperature": math.nan},
        {"temperature": math.inf},
        {"num_batch": 0},
        {"top_p": 1.5},
        {"min_p": -0.1},
        {"repeat_last_n": -2},
        {"num_gpu": -2},
        {"main_gpu": -1},
        {"num_thread": -1},
        {"repeat_penalty": -1.0},
        {"seed": math.nan},
    ],
)
def test_absurd_values_are_400(opts: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest) as info:
        resolve_options(None, opts)
    assert next(iter(opts)) in str(info.value)


def test_boundaries_accepted() -> None:
    r = resolve_options(
        None,
        {
            "num_ctx": 10_000_000,
            "num_predict": -2,
            "top_k": 0,
            "temperature": 0,
            "top_p": 1.0,
            "num_gpu": -1,
        },
    )
    assert r.load.num_ctx == 10_000_000 and r.num_predict == -2


def test_unknown_and_removed_keys_are_ignored_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="localllm.api.options"):
        r = resolve_options(None, {"tfs_z": "x", "bogus": [1], "top_k": 7})
    assert r.sampling.top_k == 7
    assert "tfs_z" in caplog.text and "bogus" in caplog.text
    assert "tfs_z" not in r.values


def test_null_request_value_keeps_lower_layer() -> None:
    assert resolve_options({"top_k": 5}, {"top_k": None}).sampling.top_k == 5


def test_model_params_may_be_text() -> None:
    r = resolve_options(
        {"num_ctx": "8192", "temperature": "0.3", "use_mmap": "false", "stop": ["<|im_end|>"]}, None
    )
    assert r.load.num_ctx == 8192 and r.sampling.temperature == 0.3
    assert r.load.use_mmap is False and r.stop == ["<|im_end|>"]
    with pytest.raises(InvalidRequest):
        resolve_options({"num_ctx": "lots"}, None)


def test_options_must_be_object() -> None:
    with pytest.raises(InvalidRequest):
        resolve_options(None, ["temperature"])  # type: ignore[arg-type]


def test_merge_does_not_mutate_defaults() -> None:
    r = resolve_options(None, None)
    r.stop.append("x")
    assert resolve_options(None, None).stop == []


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (0, 0.0),
        (30, 30.0),
        (1.5, 1.5),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("10s", 10.0),
        ("0", 0.0),
        ("-1", math.inf),
        (-1, math.inf),
        ("-5m", math.inf),
        ("300", 300.0),
    ],
)
def test_keep_alive(value: object, seconds: float | None) -> None:
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "5 minutes", "", True, [5], {"m": 5}, math.nan])
def test_keep_alive_invalid(value: object) -> None:
    with pytest.raises(InvalidRequest):
        parse_keep_alive(value)


def test_num_parallel_comes_from_the_model_only(caplog: pytest.LogCaptureFixture) -> None:
    # Ollama has no such option: a request's value is ignored (and logged) so one
    # client cannot reload a model others share; a Modelfile PARAMETER sets it.
    assert resolve_options(None, None).load.num_parallel is None
    r = resolve_options({"num_parallel": "2"}, None)
    assert r.load.num_parallel == 2
    assert r.load.apply(LoadOptions(n_parallel=4)).n_parallel == 2
    # Unset: the base (LOCALLLM_NUM_PARALLEL) stays.
    assert resolve_options(None, None).load.apply(LoadOptions(n_parallel=4)).n_parallel == 4
    with caplog.at_level(logging.WARNING, logger="localllm.api.options"):
        r = resolve_options({"num_parallel": 2}, {"num_parallel": 8})
    assert r.load.num_parallel == 2 and "num_parallel" in caplog.text
    assert resolve_options({"num_parallel": 2}, None).load != resolve_options(None, None).load


@pytest.mark.parametrize("value", [0, -1, 257, "x"])
def test_num_parallel_range(value: object) -> None:
    with pytest.raises(InvalidRequest, match="num_parallel"):
        resolve_options({"num_parallel": value}, None)
    assert resolve_options({"num_parallel": 256}, None).load.num_parallel == 256


# -- upper bounds: nothing a request sets makes the runner allocate or spawn without bound --


def test_num_thread_is_clamped_to_the_machine(caplog: pytest.LogCaptureFixture) -> None:
    # Each thread is a real one in the runner's ggml thread pool.
    cpus = machine_threads()
    assert 1 <= cpus <= (os.cpu_count() or 1)
    with caplog.at_level(logging.WARNING, logger="localllm.api.options"):
        r = resolve_options(None, {"num_thread": 100_000})
    assert r.load.num_thread == cpus
    assert r.load.apply(LoadOptions()).n_threads == cpus
    assert "num_thread=100000" in caplog.text and f"using {cpus}" in caplog.text
    # From a Modelfile PARAMETER too, and a value the machine has stays as asked.
    assert resolve_options({"num_thread": "99999"}, None).load.num_thread == cpus
    assert resolve_options(None, {"num_thread": 1}).load.num_thread == 1
    # Two requests past the machine load the same runner (no reload between them).
    assert (
        resolve_options(None, {"num_thread": 5000}).load
        == resolve_options(None, {"num_thread": 7000}).load
    )


def test_num_batch_past_the_context_is_the_context(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="localllm.api.options"):
        r = resolve_options(None, {"num_ctx": 2048, "num_batch": 1_000_000})
    assert r.load.num_batch == 2048 and "num_batch=1000000" in caplog.text
    assert r.load.apply(LoadOptions()).n_ubatch == 2048
    assert resolve_options(None, {"num_ctx": 2048, "num_batch": 256}).load.num_batch == 256


def test_repeat_last_n_past_the_context_means_the_whole_context() -> None:
    # The penalty sampler allocates repeat_last_n tokens of ring buffer in the runner.
    assert resolve_options(None, {"repeat_last_n": 2**31 - 1}).sampling.repeat_last_n == -1
    assert (
        resolve_options(None, {"num_ctx": 4096, "repeat_last_n": 5000}).sampling.repeat_last_n == -1
    )
    assert (
        resolve_options(None, {"num_ctx": 4096, "repeat_last_n": 4096}).sampling.repeat_last_n
        == 4096
    )
    assert resolve_options(None, {"repeat_last_n": 64}).sampling.repeat_last_n == 64


@pytest.mark.parametrize(
    "key",
    [
        "num_gpu",
        "main_gpu",
        "top_k",
        "num_predict",
        "num_keep",
        "draft_max",
        "draft_min",
        "draft_num_predict",
        "num_thread",
        "repeat_last_n",
        "num_batch",
        "num_ctx",
    ],
)
@pytest.mark.parametrize("value", [2**31, 1e300, 2**80])
def test_integers_past_int32_are_400_naming_the_limit(key: str, value: float) -> None:
    # They all reach a C int in the runner (a cffi OverflowError there, or a wrapped value).
    with pytest.raises(InvalidRequest) as info:
        resolve_options(None, {key: value})
    message = str(info.value)
    assert key in message and info.value.status == 400
    assert re.search(r"between -?\d+ and \d+", message), message


def test_seed_takes_any_64_bit_value_and_no_more() -> None:
    assert resolve_options(None, {"seed": 2**40}).sampling.seed == 2**40
    with pytest.raises(InvalidRequest, match=r'"seed" must be between .* and 9223372036854775807'):
        resolve_options(None, {"seed": 1e300})


@pytest.mark.parametrize(
    "key", ["temperature", "repeat_penalty", "presence_penalty", "frequency_penalty", "draft_p_min"]
)
def test_floats_past_float32_are_400(key: str) -> None:
    with pytest.raises(InvalidRequest, match=f'"{key}" must be a finite number'):
        resolve_options(None, {key: 1e300})
