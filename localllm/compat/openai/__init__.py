"""OpenAI's Chat Completions and legacy completions, embeddings and models (``/v1/*``)."""
