"""Constrained generation: GBNF grammars for Ollama's ``format`` (JSON mode, JSON Schema)."""

from __future__ import annotations

from localllm.grammar.json_schema import grammar_for_format, json_grammar, schema_to_grammar

__all__ = ["grammar_for_format", "json_grammar", "schema_to_grammar"]
