"""Sign a catalogue for ``localllm catalog update`` (a maintainer's tool, never run by users).

Once, on the maintainer's own machine::

    python -m localllm.store.catalog_sign --new-key ~/.config/localllm-signing/catalog.pem

writes an Ed25519 private key (PKCS#8 PEM, mode 0600) and prints its public key: add that
line to ``localllm/store/catalog_keys.txt`` and release.  The private key never enters a
repository, a CI secret store or the Hugging Face account that hosts the catalogue:
whoever holds it can make every localllm pull whatever they like.  For each release of
the catalogue::

    python -m localllm.store.catalog_sign ~/.config/localllm-signing/catalog.pem catalog.toml

writes ``catalog.toml.sig``; upload both files.  (``openssl pkeyutl -sign -rawin -inkey
KEY -in catalog.toml | base64 -w0`` makes the same signature.)
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path


def sign(private_pem: bytes, data: bytes) -> bytes:
    """The ``.sig`` file for ``data``: its Ed25519 signature, base64, one line."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(private_pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return base64.b64encode(key.sign(data)) + b"\n"


def new_key(path: Path) -> str:
    """Write a new private key to ``path`` (refusing to overwrite one); its public line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--new-key":
        print(f"{new_key(Path(argv[1]))}  # add this line to localllm/store/catalog_keys.txt")
        return 0
    if len(argv) != 2 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    catalogue = Path(argv[1])
    sig = catalogue.with_name(catalogue.name + ".sig")
    sig.write_bytes(sign(Path(argv[0]).read_bytes(), catalogue.read_bytes()))
    print(f"wrote {sig}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
