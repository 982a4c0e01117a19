"""What each foreign API's top-level request fields do here: the one table per API.

Owned here: for every field a current client sends or its API documents, one of
three rules, and :func:`audit`, which applies them to a body:

- **used**: the converter honours it (``USED``);
- **ignored**: accepted and logged, with why (``IGNORED``): the field asks for
  something a local daemon has no use for (billing, a hosted cache, a region) or
  does anyway (prefix reuse needs no key);
- **refused**: a 400 naming the field, only where ignoring it would return a
  wrong answer silently (``REFUSED``; Responses' stored ``prompt``, for one, is
  refused by its converter, which says what to send instead).

A field in none of these (a client newer than this table) is ignored and
logged as unknown: a client's new field must never be what stops an agent.
docs/api.md lists the same rules for users.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localllm.errors import InvalidRequest

_SAMPLING = ("temperature", "top_p", "stop", "seed", "frequency_penalty", "presence_penalty")
# llama-server's sampler fields beside OpenAI's, at the top level of a Chat Completions or
# Completions body: each becomes the native option of its name (api/options.py checks it).
LLAMA_SAMPLING = (
    "logit_bias",
    "top_k",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "repeat_last_n",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "top_n_sigma",
    "xtc_probability",
    "xtc_threshold",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
)

ANTHROPIC_USED = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "context_management",
        "mcp_servers",  # its tools are dropped with a warning: nothing local can call them
    }
)
ANTHROPIC_IGNORED = {
    "metadata": "user ids are for Anthropic's abuse checks",
    "service_tier": "there is one tier here",
    "container": "no hosted code-execution container here",
    "inference_geo": "the model runs on this machine",
    "cache_control": "prefix reuse is automatic",
}

CHAT_USED = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "response_format",
        "tools",
        "tool_choice",
        "reasoning_effort",
        "reasoning",
        "logprobs",
        "top_logprobs",
        "options",
        "keep_alive",
        "reasoning_budget_tokens",
        "thinking_budget_tokens",
        "reasoning_budget_message",
        "grammar",
        *_SAMPLING,
        *LLAMA_SAMPLING,
    }
)
_OPENAI_IGNORED = {
    "prompt_cache_key": "prefix reuse is automatic and needs no key",
    "prompt_cache_retention": "cached prefixes live as long as memory allows",
    "safety_identifier": "user ids are for OpenAI's abuse checks",
    "user": "user ids are for OpenAI's abuse checks",
    "service_tier": "there is one tier here",
    "store": "chat completions are not stored (responses are, on /v1/responses)",
    "metadata": "chat completions are not stored to tag",
    "parallel_tool_calls": "the model's template decides how many calls it makes",
    "verbosity": "a local model has no verbosity dial",
    "prediction": "predicted outputs are not used for drafting yet",
    "web_search_options": "no hosted web search here",
}
CHAT_IGNORED = {**_OPENAI_IGNORED, "modalities": "text is the only output"}
# Audio output would be silently missing: a client asking for it gets a 400.
CHAT_REFUSED = {"audio": "audio output is not supported: only text"}

RESPONSES_USED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "stream",
        "temperature",
        "top_p",
        "max_output_tokens",
        "tools",
        "tool_choice",
        "reasoning",
        "text",
        "truncation",
        "options",
        "background",
        "previous_response_id",
        "conversation",
        "prompt",
        "store",
        "metadata",
    }
)
RESPONSES_IGNORED = {
    **_OPENAI_IGNORED,
    "include": "nothing extra is kept to include (no encrypted reasoning, no hosted tools)",
    "top_logprobs": "Responses logprobs are not returned",
    "stream_options": "stream obfuscation is not needed on loopback",
    "max_tool_calls": "the agent decides when to stop calling tools",
    "client_metadata": "kept by nobody here",
}


def audit(
    body: Mapping[str, Any],
    used: frozenset[str],
    ignored: Mapping[str, str],
    refused: Mapping[str, str] | None = None,
) -> list[str]:
    """The fields of ``body`` that are ignored, each with why; a 400 for a refused one."""
    out: list[str] = []
    for key in body:
        if key in used:
            continue
        if refused and key in refused and body[key] is not None:
            raise InvalidRequest(f"{key}: {refused[key]}")
        reason = ignored.get(key) if isinstance(key, str) else None
        out.append(f"{key} ({reason})" if reason else f"{key} (unknown field)")
    return out
