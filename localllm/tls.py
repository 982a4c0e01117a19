"""One TLS context for every HTTPS client this program makes: the Hub, CDNs and
registries the daemon downloads from, and an HTTPS daemon its clients talk to.

``httpx.Client()`` builds a new SSL context each time, loading the whole CA bundle
while it holds the GIL: 40 ms on this project's 2-core test machine, during which
the event loop answers nothing.  A search makes a client per request, a pull a few,
so a burst of searches stalled ``/health`` past 100 ms.  The context is built once,
as httpx builds it (certifi's bundle; ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``
honoured), plus the system's own CA store (where an organisation installs its CA)
and ``LOCALLLM_TLS_CA`` (the CA of a daemon's self-made certificate), and shared: an
``SSLContext`` is safe to use from many threads once configured.

A top-level leaf, not part of ``store/``: the daemon's clients (``api/daemon.py``)
and ``bench`` use it too, and ``store/`` imports ``api/``'s wire types.
"""

from __future__ import annotations

import functools
import ssl

import httpx

from localllm import config
from localllm.errors import LocalLLMError


def context() -> ssl.SSLContext:
    """The shared context for the current ``LOCALLLM_TLS_CA`` (built at its first use)."""
    return _context(config.TLS_CA.get())


@functools.cache
def _context(extra_ca: str) -> ssl.SSLContext:
    ctx = httpx.create_ssl_context(trust_env=True)
    ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if extra_ca:
        try:
            ctx.load_verify_locations(cafile=extra_ca)
        except (OSError, ssl.SSLError) as exc:
            raise LocalLLMError(
                f"LOCALLLM_TLS_CA={extra_ca}: not a readable PEM CA bundle ({exc})"
            ) from None
    return ctx
