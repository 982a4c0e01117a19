"""localllm: a local LLM model manager with an Ollama-compatible daemon."""

__version__ = "0.1.0"
