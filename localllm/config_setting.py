"""``Setting``: one ``LOCALLLM_*`` variable, typed, defaulted and described, and the one
place that reads it from the environment.

A leaf, so that each area's settings module (``config_server``, ``config_engine``,
``config_store``, ``config_paths``) can build its settings and ``config.py`` can gather
them all without an import circle.  Settings are read each time ``get`` is called, so
tests (and a daemon started with another environment) see current values; a malformed
value logs a warning and falls back to the default.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

# The settings' warnings keep config.py's logger name: log filters and tests select on it.
log = logging.getLogger("localllm.config")

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: its parser, default and a one-line description."""

    name: str
    parse: Callable[[str], T]
    default: T
    description: str
    # Ollama's variable of the same meaning, read when ours is unset (a copied setup works).
    ollama: str = ""
    # How Ollama reads its variable where that differs from ``parse`` (Go's booleans, where
    # other text means true; levels; bytes only), so a copied setup means what it did there.
    ollama_parse: Callable[[str], T] | None = None

    def source(self) -> tuple[str, str] | None:
        """(variable, value) this setting comes from, or None when it is the default."""
        for var in (self.name, self.ollama):
            raw = os.environ.get(var) if var else None
            if raw is None:
                continue
            # Ollama trims spaces, then quotes (a compose file's OLLAMA_X="1" keeps them).
            text = raw.strip().strip("\"'") if var == self.ollama else raw.strip()
            if text:
                return var, text
        return None

    def get(self) -> T:
        src = self.source()
        if src is None:
            return self.default
        var, raw = src
        parse = self.ollama_parse if var == self.ollama and self.ollama_parse else self.parse
        try:
            return parse(raw)
        except ValueError as exc:
            log.warning("ignoring %s=%r (%s); using %r", var, raw, exc, self.default)
            return self.default
