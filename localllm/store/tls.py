"""One TLS context for every Hub, CDN and registry client the daemon makes.

``httpx.Client()`` builds a new SSL context each time, loading the whole CA bundle
while it holds the GIL: 40 ms on this project's 2-core test machine, during which
the event loop answers nothing.  A search makes a client per request, a pull a few,
so a burst of searches stalled ``/health`` past 100 ms.  The context is built once,
as httpx builds it (``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` honoured), and shared: an
``SSLContext`` is safe to use from many threads once configured.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def context() -> ssl.SSLContext:
    """The shared context (the environment read once, at first use)."""
    return httpx.create_ssl_context(trust_env=True)
