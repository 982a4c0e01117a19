"""How Ollama reads its ``OLLAMA_*`` variables, so that a copied Ollama setup means the same here.

``config.py`` reads the environment and falls back to Ollama's variable when
ours is unset; where Ollama spells a value differently from our setting, the
parser here reads it Ollama's way (Go's ``strconv`` rules, as its ``envconfig``
does): a switch is true for any text but Go's false words, a byte count is
digits only, ``OLLAMA_DEBUG`` is a level.  ``IGNORED`` names the Ollama
variables localllm has no use for, and why, for the daemon's start-up log and
docs/configuration.md.  ``models_dir`` reads ``OLLAMA_MODELS`` (where Ollama keeps
its models, for ``localllm import ollama``); nothing else here reads the environment.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable

log = logging.getLogger("localllm.config")

# Go's strconv.ParseBool.
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
GO_INT = re.compile(r"[+-]?[0-9]+")


def go_bool(var: str) -> Callable[[str], bool]:
    """How Ollama reads the switch ``var``: Go's booleans, and any other text is true."""

    def parse(raw: str) -> bool:
        if raw in GO_FALSE:
            return False
        if raw not in GO_TRUE:
            log.warning(
                "%s=%r is not a Go boolean: Ollama takes it as true, and so does localllm", var, raw
            )
        return True

    return parse


def go_uint(raw: str) -> int:
    """Go's strconv.ParseUint in base 10, as Ollama reads counts and byte sizes."""
    if not (raw.isascii() and raw.isdecimal()):
        raise ValueError("Ollama reads this variable as a whole number, digits only")
    return int(raw, 10)


def debug_level(raw: str) -> int:
    """OLLAMA_DEBUG as Ollama reads it: a Go true is 1, else an integer; other text is 0."""
    if raw in GO_TRUE:
        return 1
    if not GO_INT.fullmatch(raw):
        raise ValueError("Ollama reads it as 0 (info): use 1 (debug) or 2 (trace)")
    return int(raw, 10)


# Ollama's variables (its envconfig) that localllm does not read, and why.
IGNORED: dict[str, str] = {
    "OLLAMA_DEBUG_LOG_REQUESTS": "there is no request replay folder; LOCALLLM_DEBUG=1 logs the "
    "body of a request that fails",
    "OLLAMA_GO_TEMPLATE": "a model's TEMPLATE always wins over the GGUF's chat template "
    "(Ollama's default)",
    "OLLAMA_VULKAN": "Vulkan is used when its plugin is installed ('localllm backends'); "
    "LOCALLLM_LLM_LIBRARY keeps models to one library",
    "OLLAMA_IGPU_ENABLE": "integrated GPUs are used as ggml reports them; "
    "LOCALLLM_LLM_LIBRARY=cpu keeps models off every GPU",
    "OLLAMA_MAX_TRANSFER_STREAMS": "it bounds Ollama's safetensors pulls; localllm pulls GGUF "
    "files",
    "OLLAMA_NO_CLOUD": "localllm has no cloud models",
    "OLLAMA_REMOTES": "localllm has no remote (cloud) models",
    "OLLAMA_AUTH": "Ollama's signed client requests; localllm's daemon takes LOCALLLM_API_KEY",
    "OLLAMA_EDITOR": "the 'run' prompt has no external editor key",
    "OLLAMA_NEW_ENGINE": "localllm has one engine, llama.cpp's",
    "OLLAMA_MULTIUSER_CACHE": "prompt caching is per slot and always on (LOCALLLM_PROMPT_CACHE "
    "sizes the idle slots' cache)",
}


def models_dir() -> str:
    """``OLLAMA_MODELS`` read the way Ollama reads it (spaces, then quotes trimmed), or "".

    Where Ollama itself keeps its models, for ``localllm import ollama``; distinct from
    ``config.MODELS``, whose fallback to the same variable decides where *our* store is.
    """
    return os.environ.get("OLLAMA_MODELS", "").strip().strip("\"'")
