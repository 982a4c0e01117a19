"""Ollama ``options`` and ``keep_alive``: merge the layers, validate, split into engine types.

Ollama merges options as defaults <- the model's ``params`` layer (Modelfile
PARAMETERs) <- the request's ``options``.  Types are checked the way Ollama's
``api.Options.FromMap`` does (a JSON number for integers and floats, a bool for
booleans, an array of strings for ``stop``) with Ollama's error text; unknown
and removed keys are logged and ignored.  On top of Ollama we refuse values
that can only hurt (negative context, NaN temperature, ...) with a 400 instead
of letting them reach libllama, and give every integer an upper bound: each
one ends up in a C ``int`` in the runner, and some size an allocation there.
Values past what the machine or the context can use are clamped, with a note
in the daemon's log, where a user of Ollama would expect "as much as there
is": ``num_thread`` to this machine's CPUs, ``num_batch`` to ``num_ctx`` (as
llama.cpp does for causal models), ``repeat_last_n`` past the context to the
whole context (-1).  The rest are a 400 naming the limit.

What this module returns is the checked map of every option's value
(:func:`merge_options`), in Ollama's names; ``inference.options`` splits it into
the engine's types (sampling, per-request fields, load fields), so the wire's
rules stay free of the runner's.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any

from localllm.api.samplers import SAMPLER_DEFAULTS, SAMPLER_TYPES, check_samplers, coerce_bias
from localllm.api.speculation import check_speculation
from localllm.api.thinkbudget import check_budget_options
from localllm.config import parse_duration
from localllm.errors import InvalidRequest

log = logging.getLogger(__name__)

MAX_NUM_CTX = 10_000_000
MAX_NUM_BATCH = 1_000_000
MAX_NUM_PARALLEL = 256  # llama.cpp's LLAMA_MAX_SEQ: sequences one context can hold
MAX_INT = 2**31 - 1  # integer options reach the runner's C calls as int32
FLOAT32_MAX = 3.4028234663852886e38
MAX_SEED = 2**63 - 1  # a seed is taken modulo 2**32 (as Ollama's uint32 conversion), like Go's int

# Ollama's option names and their wire types (api.Options, current main).
OPTION_TYPES: dict[str, str] = {
    "num_ctx": "integer",
    "num_batch": "integer",
    "num_gpu": "integer",
    "main_gpu": "integer",
    "use_mmap": "boolean",
    "num_thread": "integer",
    "draft_num_predict": "integer",
    "num_keep": "integer",
    "seed": "integer",
    "num_predict": "integer",
    "top_k": "integer",
    "top_p": "float32",
    "min_p": "float32",
    "typical_p": "float32",
    "repeat_last_n": "integer",
    "temperature": "float32",
    "repeat_penalty": "float32",
    "presence_penalty": "float32",
    "frequency_penalty": "float32",
    "stop": "array",
    # Ours, not Ollama's: slots of the model's runner.  Only a Modelfile PARAMETER
    # sets it (see MODEL_ONLY_OPTIONS).
    "num_parallel": "integer",
    # Ours: speculative decoding, "off", "auto" (prompt lookup where it pays), "ngram"
    # (prompt lookup) or "draft" (the model's DRAFT model), and llama-server's draft
    # limits (see api/speculation.py).
    "speculative": "string",
    "draft_max": "integer",
    "draft_min": "integer",
    "draft_p_min": "float32",
    # Ours: the thinking budget in tokens (-1: none, 0: no thinking) and the text written
    # before the block's end marker when it is spent (api/thinkbudget.py).
    "think_budget": "integer",
    "think_budget_message": "string",
    # llama.cpp's samplers past Ollama's (logit_bias, DRY, XTC, top_n_sigma, mirostat):
    # api/samplers.py.
    **SAMPLER_TYPES,
}
# Integer options that refuse a fraction rather than truncate it as Go does: a budget of
# 1.5 tokens is a client's mistake worth a 400 (Anthropic's budget_tokens is one too).
WHOLE_OPTIONS = frozenset({"think_budget"})

# Options a model's params layer may set but a request may not.  Ollama has no
# per-request num_parallel (it ignores the unknown key), and letting a client's
# option reload a model that other clients share would let one client evict them.
MODEL_ONLY_OPTIONS = frozenset({"num_parallel"})

# Options Ollama removed (2025-05); requests still send them, so they are ignored quietly-ish.
# (mirostat went too, but llama.cpp has it: api/samplers.py.)
REMOVED_OPTIONS = frozenset(
    {
        "tfs_z",
        "penalize_newline",
        "numa",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "use_mlock",
    }
)

# Ollama's defaults; load-time ones left as None mean "automatic" (decided by the planner).
OLLAMA_DEFAULTS: dict[str, Any] = {
    "num_ctx": None,
    "num_batch": 512,
    "num_gpu": -1,
    "main_gpu": None,
    "use_mmap": None,
    "num_thread": 0,
    "draft_num_predict": 0,
    "num_keep": 4,
    "seed": -1,
    "num_predict": -1,
    "top_k": 40,
    "top_p": 0.9,
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_last_n": 64,
    "temperature": 0.8,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "stop": [],
    "num_parallel": None,  # None: LOCALLLM_NUM_PARALLEL
    # None: the mode's own default (api/speculation.py); speculative's depends on the
    # model: "draft" with a draft model, else "auto".
    "speculative": None,
    "draft_max": 0,
    "draft_min": None,
    "draft_p_min": None,
    "think_budget": None,  # None: no limit, unless the request's think level sets one
    "think_budget_message": "",
    **SAMPLER_DEFAULTS,
}


def _type_error(key: str, kind: str) -> InvalidRequest:
    return InvalidRequest(f'option "{key}" must be of type {kind}')


def _coerce(key: str, value: Any, *, from_text: bool) -> Any:
    """Check one value against its wire type; ``from_text`` also accepts numeric strings."""
    kind = OPTION_TYPES[key]
    if kind == "bias":
        return coerce_bias(value)  # its text form is JSON, from a PARAMETER too
    if from_text and isinstance(value, str) and kind != "string":
        value = _parse_text(key, kind, value)
    if kind == "integer":
        # JSON numbers arrive as int or float; Go truncates a float into an int field.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _type_error(key, kind)
        if not math.isfinite(value):
            raise InvalidRequest(f'option "{key}" must be a finite number')
        if key in WHOLE_OPTIONS and value != int(value):
            raise InvalidRequest(f'option "{key}" must be an integer, got {value!r}')
        return int(value)
    if kind == "float32":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _type_error(key, kind)
        # Past float32's range the runner's C float would be infinite.
        if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
            raise InvalidRequest(f'option "{key}" must be a finite number')
        return float(value)
    if kind == "boolean":
        if not isinstance(value, bool):
            raise _type_error(key, kind)
        return value
    if kind == "string":
        if not isinstance(value, str):
            raise _type_error(key, kind)
        return value
    # "array": stop sequences; a lone string is accepted as a one-element list.
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise _type_error(key, kind)
    return [v for v in value if v]  # an empty stop string would end every generation at once


def _parse_text(key: str, kind: str, text: str) -> Any:
    """Modelfile PARAMETER values may be stored as text; parse them like Ollama's create."""
    raw = text.strip()
    try:
        if kind == "integer":
            return int(raw, 10)
        if kind == "float32":
            return float(raw)
    except ValueError:
        raise _type_error(key, kind) from None
    if kind == "boolean":
        low = raw.lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0"):
            return False
        raise _type_error(key, kind)
    return text


def _merge_layer(
    out: dict[str, Any],
    layer: Mapping[str, Any] | None,
    *,
    from_text: bool,
    origin: str,
    request: bool = False,
) -> None:
    if layer is None:
        return
    if not isinstance(layer, Mapping):
        raise InvalidRequest("options must be an object")
    for key, value in layer.items():
        if key in REMOVED_OPTIONS:
            log.warning("ignoring removed option %r in %s", key, origin)
            continue
        if key not in OPTION_TYPES:
            log.warning("ignoring unknown option %r in %s", key, origin)
            continue
        if key in MODEL_ONLY_OPTIONS and request:
            log.warning("ignoring option %r in %s: only a Modelfile PARAMETER sets it", key, origin)
            continue
        if value is None:  # JSON null: leave the lower layer's value
            continue
        out[key] = _coerce(key, value, from_text=from_text)


def machine_threads() -> int:
    """CPUs this process may run on: the most threads a runner can use to any gain."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _clamp(v: dict[str, Any]) -> None:
    """Values past what the machine or context can use, cut to what it can (logged)."""

    def note(key: str, new: int, why: str) -> None:
        log.warning("option %s=%d is more than %s; using %d", key, v[key], why, new)
        v[key] = new

    cpus = machine_threads()
    if v["num_thread"] > cpus:
        # Threads past the CPUs only contend; tens of thousands would be spawned.
        note("num_thread", cpus, f"this machine's {cpus} CPUs")
    ctx = v["num_ctx"]
    if ctx is not None and v["num_batch"] > ctx:
        # llama.cpp cuts a causal model's batch to the context; a pooled-embedding
        # model's micro-batch is the batch, and its compute buffer grows with its square.
        note("num_batch", ctx, f"num_ctx ({ctx})")
    if v["repeat_last_n"] > (ctx or MAX_NUM_CTX):
        # Past the context it means the whole context, and the penalty sampler
        # allocates a ring buffer of repeat_last_n tokens in the runner.
        note("repeat_last_n", -1, f"the context ({ctx or MAX_NUM_CTX} tokens)")


def _check_ranges(v: dict[str, Any]) -> None:
    def bad(key: str, why: str) -> InvalidRequest:
        return InvalidRequest(f'option "{key}" {why}, got {v[key]!r}')

    if v["num_ctx"] is not None and not 0 < v["num_ctx"] <= MAX_NUM_CTX:
        raise bad("num_ctx", f"must be between 1 and {MAX_NUM_CTX}")
    if not 0 < v["num_batch"] <= MAX_NUM_BATCH:
        raise bad("num_batch", f"must be between 1 and {MAX_NUM_BATCH}")
    for key, low in (
        ("num_gpu", -1),
        ("num_thread", 0),
        ("num_predict", -2),
        ("top_k", 0),
        ("repeat_last_n", -1),
        ("num_keep", -1),
    ):
        if v[key] < low:
            raise bad(key, f"must be >= {low}")
    if v["main_gpu"] is not None and v["main_gpu"] < 0:
        raise bad("main_gpu", "must be >= 0")
    if v["num_parallel"] is not None and not 0 < v["num_parallel"] <= MAX_NUM_PARALLEL:
        raise bad("num_parallel", f"must be between 1 and {MAX_NUM_PARALLEL}")
    for key in ("top_p", "min_p", "typical_p"):
        if not 0.0 <= v[key] <= 1.0:
            raise bad(key, "must be between 0 and 1")
    for key in ("temperature", "repeat_penalty"):
        if v[key] < 0:
            raise bad(key, "must be >= 0")
    for key, kind in OPTION_TYPES.items():
        if kind == "integer" and v[key] is not None:
            top = MAX_SEED if key == "seed" else MAX_INT
            if not -top - 1 <= v[key] <= top:
                raise bad(key, f"must be between {-top - 1} and {top}")
    check_speculation(v)
    check_budget_options(v)
    check_samplers(v, v["num_ctx"] or MAX_NUM_CTX)
    _clamp(v)


def merge_options(
    model_params: Mapping[str, Any] | None,
    request_options: Mapping[str, Any] | None,
    *,
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Merge Ollama's defaults <- ``defaults`` (server settings) <- model params <- request,
    checked: every option's value, by name.

    ``model_params`` is the model's params layer (Modelfile PARAMETERs; numeric
    strings are accepted there); ``request_options`` is the request's
    ``options`` object, typed strictly.  Raises :class:`InvalidRequest`.
    """
    values: dict[str, Any] = {
        k: (list(v) if isinstance(v, list) else v) for k, v in OLLAMA_DEFAULTS.items()
    }
    _merge_layer(values, defaults, from_text=True, origin="defaults")
    _merge_layer(values, model_params, from_text=True, origin="model parameters")
    _merge_layer(values, request_options, from_text=False, origin="request options", request=True)
    _check_ranges(values)
    return values


def parse_keep_alive(value: Any) -> float | None:
    """A request's ``keep_alive`` in seconds: ``None`` (use the default), ``inf`` or ``>= 0``.

    Numbers are seconds, strings are Go durations (``"5m"``, ``"1h30m"``) or
    plain numbers; a negative value means forever.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidRequest(f"invalid keep_alive {value!r}: expected a duration or seconds")
    try:
        return parse_duration(value)
    except (ValueError, OverflowError):
        raise InvalidRequest(f"invalid keep_alive duration {value!r}") from None
