"""Load testing for Ollama- and OpenAI-compatible servers (``localllm bench``, ``bench/``).

The pieces, each usable alone:

* ``protocols``: request bodies and stream parsing for ``/api/*`` (NDJSON) and
  ``/v1/*`` (SSE), so one client measures our daemon, Ollama, llama-server or vLLM;
* ``runner``: httpx async streaming, closed-loop virtual users per concurrency
  level, one ``RequestResult`` per request (nothing is dropped silently);
* ``stats``: percentiles and the per-level summary (TTFT, inter-token and
  end-to-end latency, tokens/s, errors, lost requests);
* ``budget``: "how many users fit in a p95 latency budget" from measured rates;
* ``plot``: a dependency-free PNG line chart of latency against concurrency.
"""

from __future__ import annotations
