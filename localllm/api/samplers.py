"""The sampler options past Ollama's: llama.cpp's logit bias, DRY, XTC, top-n-sigma, mirostat.

Owned here: their names, wire types and defaults (llama.cpp's, every one off),
their checks, and the one form ``logit_bias`` takes after them.  ``api.options``
merges them with Ollama's options; the engine builds them into llama.cpp's chain
in llama.cpp's order (engine/sampling.py).  A value that would change the output
is applied or refused with a 400 naming it, never dropped: where llama.cpp would
quietly cut or skip one (a DRY breaker past 40 bytes, a base below 1) we refuse.

``logit_bias`` comes as OpenAI's object (``{"15043": 5}``, a key that is not a
number being a text, each of whose tokens gets the bias, as llama-server does)
or llama-server's array of ``[id or text, bias]`` pairs; a bias is -100..100
(OpenAI's range), or ``false`` to ban the token outright.  Its form here: a
list of ``(id or text, bias)``, ``false`` as minus infinity.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, MutableMapping
from typing import Any

from localllm.errors import InvalidRequest

log = logging.getLogger(__name__)

SAMPLER_TYPES: dict[str, str] = {
    "logit_bias": "bias",
    "mirostat": "integer",
    "mirostat_tau": "float32",
    "mirostat_eta": "float32",
    "top_n_sigma": "float32",
    "xtc_probability": "float32",
    "xtc_threshold": "float32",
    "dry_multiplier": "float32",
    "dry_base": "float32",
    "dry_allowed_length": "integer",
    "dry_penalty_last_n": "integer",
    "dry_sequence_breakers": "array",
}
# llama.cpp's defaults (common/common.h): all of them off.
DRY_BREAKERS = ("\n", ":", '"', "*")
SAMPLER_DEFAULTS: dict[str, object] = {
    "logit_bias": [],
    "mirostat": 0,
    "mirostat_tau": 5.0,
    "mirostat_eta": 0.1,
    "top_n_sigma": -1.0,
    "xtc_probability": 0.0,
    "xtc_threshold": 0.1,
    "dry_multiplier": 0.0,
    "dry_base": 1.75,
    "dry_allowed_length": 2,
    "dry_penalty_last_n": 64,
    "dry_sequence_breakers": list(DRY_BREAKERS),
}

MAX_BIAS = 100.0  # OpenAI's range; at +-100 a token is as good as forced or banned
MAX_BIAS_KEYS = 1024
MAX_BIAS_TEXT = 1000  # characters of one text key (each of its tokens is biased)
MAX_BREAKERS = 32  # llama.cpp scans the whole vocabulary once per breaker
MAX_BREAKER_BYTES = 40  # llama.cpp cuts a longer one to this
_ID = re.compile(r"-?[0-9]+")

BiasKey = int | str


def _bias_value(value: object) -> float:
    if value is False:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest("logit_bias values must be numbers (or false to ban the token)")
    if not -MAX_BIAS <= value <= MAX_BIAS:  # NaN fails this too
        raise InvalidRequest(
            f"logit_bias values must be between -{MAX_BIAS:g} and {MAX_BIAS:g}, got {value!r}"
        )
    return float(value)


def _bias_key(key: object) -> BiasKey:
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise InvalidRequest("logit_bias keys must be token ids or texts")
    if isinstance(key, str):
        if len(key) > MAX_BIAS_TEXT:
            raise InvalidRequest(f"logit_bias texts may be at most {MAX_BIAS_TEXT} characters")
        if _ID.fullmatch(key):
            return int(key)
    return key


def coerce_bias(value: object) -> list[tuple[BiasKey, float]]:
    """``logit_bias`` in its one form, from an object, an array of pairs or JSON text."""
    if isinstance(value, str):  # a Modelfile PARAMETER or /set parameter holds text
        try:
            value = json.loads(value)
        except ValueError:
            raise InvalidRequest("logit_bias must be a JSON object or array") from None
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        if not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
            raise InvalidRequest("logit_bias as an array holds [token, bias] pairs")
        items = [(p[0], p[1]) for p in value]
    else:
        raise InvalidRequest('option "logit_bias" must be of type object')
    if len(items) > MAX_BIAS_KEYS:
        raise InvalidRequest(f"logit_bias may hold at most {MAX_BIAS_KEYS} entries")
    return [(_bias_key(k), _bias_value(b)) for k, b in items]


def check_samplers(v: MutableMapping[str, Any], ctx: int) -> None:
    """Refuse what these samplers cannot do (400s naming the option); a DRY window past
    the context (``ctx`` tokens, or the most a context may hold when not chosen yet)
    becomes the whole context, as ``repeat_last_n`` does."""

    def bad(key: str, why: str) -> InvalidRequest:
        return InvalidRequest(f'option "{key}" {why}, got {v[key]!r}')

    if v["mirostat"] not in (0, 1, 2):
        raise bad("mirostat", "must be 0 (off), 1 or 2")
    for key in ("mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_allowed_length"):
        if v[key] < 0:
            raise bad(key, "must be >= 0")
    for key in ("xtc_probability", "xtc_threshold"):
        if not 0.0 <= v[key] <= 1.0:
            raise bad(key, "must be between 0 and 1")
    if v["dry_multiplier"] > 0 and v["dry_base"] < 1.0:
        # llama.cpp's DRY turns itself off below 1 (llama-server swaps in its default).
        raise bad("dry_base", "must be >= 1 when dry_multiplier is set")
    if v["dry_penalty_last_n"] < -1:
        raise bad("dry_penalty_last_n", "must be >= -1")
    breakers = v["dry_sequence_breakers"]
    if len(breakers) > MAX_BREAKERS:
        raise InvalidRequest(f'option "dry_sequence_breakers" may hold at most {MAX_BREAKERS}')
    for b in breakers:
        if len(b.encode("utf-8")) > MAX_BREAKER_BYTES:
            raise InvalidRequest(
                f'option "dry_sequence_breakers": {b!r} is longer than '
                f"llama.cpp's {MAX_BREAKER_BYTES} bytes"
            )
    if v["dry_penalty_last_n"] > ctx:
        # The DRY sampler allocates a buffer of this many tokens in the runner.
        log.warning(
            "option dry_penalty_last_n=%d is more than the context; using -1",
            v["dry_penalty_last_n"],
        )
        v["dry_penalty_last_n"] = -1
