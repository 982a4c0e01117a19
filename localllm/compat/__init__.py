"""Compatibility layers: pure converters between other APIs (OpenAI) and our native shapes."""
