"""The chat/generate/embed use case, for every HTTP protocol alike.

``service`` resolves the model and holds a slot on the scheduler; ``plan``
validates a request, renders its prompt and streams Ollama-shaped chunks;
``shaping`` turns raw pieces into content, thinking and tool calls;
``fanout`` runs several choices of one request at once.  ``server/`` routes
and ``compat/`` converters call into here; nothing here knows about HTTP.
"""
