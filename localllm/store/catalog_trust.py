"""Whether a downloaded catalogue may be used: its signature, its publishers, its date.

``localllm catalog update`` downloads from one Hugging Face account; whoever holds that
account could publish anything there, a ``.sha256`` beside it included.  So trust rests
on what the wheel ships instead:

1. **Signature.**  The file's exact bytes must carry an Ed25519 signature, detached in
   ``<file>.sig`` (base64, one line), by one of the public keys in ``catalog_keys.txt``
   beside this module.  It is checked at update and again on every read of the
   downloaded copy, so a copy written by an older localllm (unsigned) is ignored.
   Maintainers sign with ``python -m localllm.store.catalog_sign`` (see there).
2. **Publishers.**  Every entry must point at a repo whose owner is in ``PUBLISHERS``
   or already used by the built-in catalogue; other entries are dropped with a log
   line.  A second line of defence should the signing key leak.
3. **Date.**  A download never outranks a built-in catalogue of the same or a later
   date (``outranks``), and one dated more than a day past today is refused at update:
   it would otherwise outrank every later release's built-in catalogue.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import logging
from pathlib import Path

from localllm.store.catalog_file import CatalogError, Family

log = logging.getLogger(__name__)

KEYS_FILE = "catalog_keys.txt"  # package data: one base64 Ed25519 public key a line
SIG_SUFFIX = ".sig"
SIG_MAX_BYTES = 4096  # a signature line is 89 bytes; anything much larger is not one
# Clocks disagree, and a catalogue is dated in its publisher's time zone.
CLOCK_SKEW = dt.timedelta(days=1)
# Owners whose repos a downloaded catalogue may point at, besides those the built-in
# catalogue already uses: the models' own organisations, and the GGUF publishers people
# already pull from.  Compared case-insensitively, as the Hub treats user names.
PUBLISHERS = frozenset(
    {
        "meta-llama",
        "qwen",
        "google",
        "mistralai",
        "microsoft",
        "deepseek-ai",
        "ibm-granite",
        "ggml-org",
        "unsloth",
        "bartowski",
        "lmstudio-community",
    }
)


def trusted_keys() -> list[bytes]:
    """The raw 32-byte public keys this localllm trusts (package data; tests swap it)."""
    from importlib.resources import files

    text = files("localllm.store").joinpath(KEYS_FILE).read_text("ascii")
    keys = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            keys.append(base64.b64decode(line, validate=True))
    return keys


def verify(data: bytes, signature: bytes, where: str) -> None:
    """``CatalogError`` unless ``signature`` (a ``.sig`` file's bytes) signs ``data``
    with one of ``trusted_keys()``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        raw = base64.b64decode(signature.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 64:
        raise CatalogError(f"{where}{SIG_SUFFIX}: not an Ed25519 signature (base64 of 64 bytes)")
    for key in trusted_keys():
        try:
            Ed25519PublicKey.from_public_bytes(key).verify(raw, data)
        except (InvalidSignature, ValueError):
            continue
        return
    raise CatalogError(f"{where}: its signature does not verify with any key this localllm ships")


def read_signature(path: Path) -> bytes:
    """The ``.sig`` beside a downloaded catalogue, bounded; ``CatalogError`` when missing."""
    sig = path.with_name(path.name + SIG_SUFFIX)
    try:
        with open(sig, "rb") as fh:
            return fh.read(SIG_MAX_BYTES)
    except FileNotFoundError:
        raise CatalogError(
            f"{path}: no signature beside it (an older localllm's download?); "
            "`localllm catalog update` fetches a signed one"
        ) from None


def publishers(builtin: dict[str, Family]) -> frozenset[str]:
    """``PUBLISHERS`` and every owner the built-in catalogue points at, lower case."""
    owners = {tag.source.namespace.lower() for fam in builtin.values() for tag in fam.tags.values()}
    return PUBLISHERS | owners


def keep_known_publishers(
    families: dict[str, Family], builtin: dict[str, Family], where: str
) -> dict[str, Family]:
    """``families`` without the entries whose repo's owner is not in ``publishers()``;
    a family left with no tags goes too, and a ``latest`` that pointed at a dropped tag
    is unset."""
    allowed = publishers(builtin)
    out: dict[str, Family] = {}
    for key, fam in families.items():
        tags = {}
        for tag, entry in fam.tags.items():
            if entry.source.namespace.lower() in allowed:
                tags[tag] = entry
            else:
                log.warning(
                    "%s: dropped %s:%s: %s is not a publisher this localllm knows",
                    where,
                    fam.name,
                    tag,
                    entry.source.display,
                )
        if tags:
            latest = fam.latest if fam.latest in tags else None
            out[key] = dataclasses.replace(fam, tags=tags, latest=latest)
    return out


def today() -> dt.date:
    """Today in UTC (a function, so tests can set the clock)."""
    return dt.datetime.now(dt.UTC).date()


def check_date(updated: dt.date | None, where: str) -> None:
    """``CatalogError`` for a catalogue dated later than tomorrow."""
    if updated is not None and updated > today() + CLOCK_SKEW:
        raise CatalogError(
            f"{where}: dated {updated.isoformat()}, after today ({today().isoformat()}): "
            "refused, since it would outrank every later built-in catalogue"
        )


def outranks(updated: dt.date | None, builtin: dt.date | None) -> bool:
    """Whether a download dated ``updated`` replaces a built-in catalogue dated ``builtin``:
    only when strictly newer, so an upgrade of localllm is never hidden by a download."""
    if builtin is None:
        return True
    return updated is not None and updated > builtin
