"""Pure converters between foreign APIs and our native (Ollama-shaped) requests and chunks.

One package per API, each split by direction: ``request`` (their body -> our
``/api/chat`` or ``/api/generate`` body, plus what the route must do: stream,
``n``, the forced-tool decision), ``response`` (a finished native result ->
their object) and ``stream`` (native chunks -> their server-sent events).

- ``openai/``: Chat Completions (its messages in ``openai.messages``), legacy
  completions, embeddings, models; OpenAI's error shape.
- ``responses/``: OpenAI's Responses API (its ``input`` items in ``responses.input``).
- ``anthropic/``: Anthropic's Messages API; Anthropic's error shape.
- ``frames``: what they share (SSE frames, ids, field checks, the stream interface).

Each API's ``types.py`` names its shapes as ``TypedDict``s, in its own field names:
the request body as read and the objects and events as written; the native bodies
the converters write are ``api/bodies.py``'s.  The server runs every converter the
same way (``server/foreign.py``: read, convert, log what was ignored, validate, plan).

Nothing here imports ``server/`` or ``inference/`` (tests/test_import_boundary.py).
"""
