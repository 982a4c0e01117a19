"""The daemon's certificate: ``LOCALLLM_TLS_CERT`` and ``LOCALLLM_TLS_KEY``, checked at start.

uvicorn loads the pair itself when it starts serving, but what it says about a bad
one is a traceback, after the socket is bound and the pid file written; and an
encrypted key would make OpenSSL ask for its passphrase on a terminal a service
does not have.  So ``check()`` loads the pair once first, the way uvicorn will, and
turns each way it can fail into one sentence: only one of the two set, a file that
cannot be read, one that is not PEM, a key that is not the certificate's, a key
with a passphrase, or ``https://`` in ``LOCALLLM_HOST`` with neither set.
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import NamedTuple

from localllm import config
from localllm.errors import LocalLLMError

log = logging.getLogger("localllm.serve")


class TlsFiles(NamedTuple):
    cert: str
    key: str


class _Encrypted(Exception):
    """Raised by the passphrase callback: the key asks for a passphrase we do not have."""


def configured() -> TlsFiles | None:
    """The pair as set (unchecked), or None for plain HTTP."""
    cert, key = config.TLS_CERT.get(), config.TLS_KEY.get()
    return TlsFiles(cert, key) if cert and key else None


def check() -> TlsFiles | None:
    """The pair, loaded once to prove it works; None for plain HTTP; else LocalLLMError."""
    cert, key = config.TLS_CERT.get(), config.TLS_KEY.get()
    if not cert and not key:
        if config.host_says_https():
            raise LocalLLMError(
                "LOCALLLM_HOST asks for https:// but LOCALLLM_TLS_CERT and LOCALLLM_TLS_KEY "
                "are not set: set both to serve HTTPS, or write the address without https://"
            )
        return None
    if not cert or not key:
        missing, given = (
            ("LOCALLLM_TLS_KEY", "LOCALLLM_TLS_CERT")
            if cert
            else ("LOCALLLM_TLS_CERT", "LOCALLLM_TLS_KEY")
        )
        raise LocalLLMError(f"{given} is set but {missing} is not: HTTPS needs both")
    for name, path in (("LOCALLLM_TLS_CERT", cert), ("LOCALLLM_TLS_KEY", key)):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise LocalLLMError(f"{name}={path}: cannot read it ({exc.strerror or exc})") from None
    _load(cert, key)
    _warn_if_key_shared(key)
    return TlsFiles(cert, key)


def _load(cert: str, key: str) -> None:
    def no_passphrase() -> bytes:
        raise _Encrypted

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key, password=no_passphrase)
    except _Encrypted:
        raise LocalLLMError(
            f"LOCALLLM_TLS_KEY={key} is encrypted: the daemon cannot ask for its passphrase; "
            "store it unencrypted, readable by the daemon's user only (chmod 600)"
        ) from None
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            what = "the key does not belong to the certificate"
        else:
            what = f"not a PEM certificate and its private key ({exc.reason or exc})"
        raise LocalLLMError(f"LOCALLLM_TLS_CERT={cert}, LOCALLLM_TLS_KEY={key}: {what}") from None


def _warn_if_key_shared(key: str) -> None:
    # As ssh says of a private key others can read: a warning, since some setups give a
    # group of service accounts one key; the daemon's own account is what matters.
    if os.name == "posix" and os.stat(key).st_mode & 0o004:
        log.warning("LOCALLLM_TLS_KEY=%s can be read by every user: chmod 600 it", key)
