"""A throwaway Ed25519 key pair for catalogue tests, and publishing a signed catalogue.

Tests never hold the real signing key (it is not in the repository): they make their
own pair and point ``catalog_trust.trusted_keys`` at its public half with ``trust``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from localllm.store import catalog_sign, catalog_trust
from tests.support.hubstub import HubStub


@dataclass(frozen=True)
class Key:
    pem: bytes
    public: bytes

    def sign(self, data: bytes) -> bytes:
        """The ``.sig`` file's bytes for ``data``."""
        return catalog_sign.sign(self.pem, data)


def new_key() -> Key:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return Key(pem, public)


def trust(monkeypatch: pytest.MonkeyPatch, *keys: Key) -> None:
    """Make ``keys`` the only ones the verifier accepts (instead of the shipped ones)."""
    monkeypatch.setattr(catalog_trust, "trusted_keys", lambda: [k.public for k in keys])


def publish(
    hub: HubStub,
    data: bytes,
    key: Key | None,
    *,
    repo: str = "localllm/catalog",
    file: str = "catalog.toml",
    sig: bytes | None = None,
) -> None:
    """``data`` in ``repo`` with its ``.sig`` (by ``key``, or ``sig`` as given; no
    ``.sig`` at all when both are None)."""
    hub.add_file(repo, file, data, lfs=False)
    if sig is None and key is not None:
        sig = key.sign(data)
    if sig is not None:
        hub.add_file(repo, file + ".sig", sig, lfs=False)


def install(folder: Path, data: bytes, key: Key | None) -> Path:
    """A downloaded copy on disk, as ``catalog update`` leaves it (signed by ``key``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "catalog.toml"
    path.write_bytes(data)
    if key is not None:
        (folder / "catalog.toml.sig").write_bytes(key.sign(data))
    return path
