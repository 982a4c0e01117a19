"""Prompt rendering: GGUF Jinja chat templates (sandboxed) and the fallback format."""
