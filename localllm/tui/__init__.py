"""The terminal chat app (``localllm chat``): Textual, a client of the daemon over HTTP."""
