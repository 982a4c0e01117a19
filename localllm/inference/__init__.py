"""The chat/generate/embed use case, for every HTTP protocol alike.

``service`` resolves the model and holds a slot on the scheduler; ``build``
checks a request and renders its prompt into a plan (``plan``: the request
resolved once, ``options`` making the engine's types); ``generation`` runs it and
streams Ollama-shaped chunks (``fold`` makes them one object); ``shaping``
turns raw pieces into content, thinking and tool calls; ``fanout`` runs
several choices of one request at once; ``embed`` answers embeddings.
``server/`` routes call into here; nothing here knows about HTTP or the
foreign APIs (``compat/``).
"""
