"""GGUF files: the bounded header reader (``reader``) and what it tells about a model (``info``).

Hostile files are refused here, before libllama or the planner ever sees them.
"""
