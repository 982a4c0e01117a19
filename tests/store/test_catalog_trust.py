"""The trust rules of a downloaded catalogue (store/catalog_trust.py): the signature by a
shipped key, checked again on every read; the publishers' allow-list; the date rules;
and the maintainer's signing tool."""

from __future__ import annotations

import base64
import datetime as dt
import logging
import stat
from pathlib import Path

import pytest

from localllm import paths
from localllm.store import catalog, catalog_sign, catalog_trust
from localllm.store.names import parse_name
from tests.support.catalogkeys import Key, install, new_key, trust

BUILTIN_DATE = catalog.parse(catalog.builtin_bytes(), "built-in")[1]
assert BUILTIN_DATE is not None
NEWER = BUILTIN_DATE + dt.timedelta(days=1)


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> Key:
    k = new_key()
    trust(monkeypatch, k)
    monkeypatch.setattr(catalog_trust, "today", lambda: NEWER)
    return k


def _copy(updated: dt.date, *entries: str) -> bytes:
    tags = "".join(f'tags."{t}" = "hf.co/{src}"\n' for t, src in (e.split("=") for e in entries))
    first = entries[0].split("=")[0]
    return f'format = 1\nupdated = {updated}\n[models.only]\nlatest = "{first}"\n{tags}'.encode()


def test_a_copy_on_disk_is_used_only_while_its_signature_verifies(
    key: Key, caplog: pytest.LogCaptureFixture
) -> None:
    # An older localllm's unsigned download, dated far ahead: it used to outrank every
    # later built-in catalogue.  Now it is ignored, with a warning.
    far = _copy(dt.date(2099, 1, 1), "1b=bartowski/Only-GGUF:Q4_K_M")
    install(paths.catalog_data(), far, None)
    with caplog.at_level(logging.WARNING, logger="localllm.store.catalog"):
        assert catalog.load().base == "built-in"
    assert "no signature beside it" in caplog.text
    install(paths.catalog_data(), far, new_key())  # signed, but not by a shipped key
    assert catalog.load().base == "built-in"
    assert "does not verify with any key this localllm ships" in caplog.text
    install(paths.catalog_data(), far, key)
    assert catalog.load().base == "updated"
    # Edited after signing: ignored again.
    (paths.catalog_data() / "catalog.toml").write_bytes(far.replace(b"Only", b"Evil"))
    assert catalog.load().base == "built-in"


def test_the_wheel_ships_a_public_key_and_no_private_one() -> None:
    keys = catalog_trust.trusted_keys()
    assert keys and all(len(k) == 32 for k in keys)
    from importlib.resources import files

    text = files("localllm.store").joinpath(catalog_trust.KEYS_FILE).read_text()
    assert "PRIVATE" not in text


def test_entries_of_unknown_publishers_are_dropped_with_a_log_line(
    key: Key, caplog: pytest.LogCaptureFixture
) -> None:
    data = _copy(
        NEWER,
        "big=someone/Evil-GGUF:Q4_K_M",
        "small=Qwen/Qwen3-0.6B-GGUF:Q8_0",
        "mid=lmstudio-community/Mid-GGUF:Q4_K_M",
    )
    data += b'[models.bad]\ntags.a = "hf.co/evil/Bad-GGUF:Q4_K_M"\n'
    install(paths.catalog_data(), data, key)
    with caplog.at_level(logging.WARNING, logger="localllm.store.catalog_trust"):
        cat = catalog.load()
    assert cat.base == "updated" and list(cat.families) == ["library/only"]
    only = cat.families["library/only"]
    assert sorted(only.tags) == ["mid", "small"]
    assert only.latest is None  # it pointed at the dropped entry
    assert "dropped only:big: hf.co/someone/Evil-GGUF:Q4_K_M is not a publisher" in caplog.text
    assert "dropped bad:a" in caplog.text
    assert catalog.resolve(parse_name("only:small")) is not None


def test_the_allow_list_never_refuses_a_builtin_entry() -> None:
    builtin, _ = catalog.parse(catalog.builtin_bytes(), "built-in")
    assert catalog_trust.keep_known_publishers(builtin, builtin, "built-in") == builtin
    for org in ("meta-llama", "Qwen", "google", "mistralai", "ggml-org", "bartowski"):
        assert org.lower() in catalog_trust.publishers(builtin)


def test_the_date_rules(key: Key) -> None:
    catalog_trust.check_date(NEWER + dt.timedelta(days=1), "x")  # a day of clock skew
    catalog_trust.check_date(None, "x")
    with pytest.raises(catalog.CatalogError, match=r"^x: dated .*after today"):
        catalog_trust.check_date(NEWER + dt.timedelta(days=2), "x")
    assert catalog_trust.outranks(NEWER, BUILTIN_DATE)
    assert not catalog_trust.outranks(BUILTIN_DATE, BUILTIN_DATE)  # equal: built-in wins
    assert not catalog_trust.outranks(None, BUILTIN_DATE)


def test_the_maintainers_signing_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pem = tmp_path / "signing" / "catalog.pem"
    assert catalog_sign.main(["--new-key", str(pem)]) == 0
    public = capsys.readouterr().out.split()[0]
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):  # never overwrites a key
        catalog_sign.main(["--new-key", str(pem)])
    cat = tmp_path / "catalog.toml"
    cat.write_bytes(_copy(NEWER, "1b=bartowski/Only-GGUF:Q4_K_M"))
    assert catalog_sign.main([str(pem), str(cat)]) == 0
    monkeypatch.setattr(catalog_trust, "trusted_keys", lambda: [base64.b64decode(public)])
    sig = (tmp_path / "catalog.toml.sig").read_bytes()
    catalog_trust.verify(cat.read_bytes(), sig, "signed")
    with pytest.raises(catalog.CatalogError, match="does not verify"):
        catalog_trust.verify(cat.read_bytes() + b"\n", sig, "edited")
    assert catalog_sign.main([]) == 2
