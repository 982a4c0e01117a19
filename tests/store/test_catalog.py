"""The library-name catalogue: the built-in file, name resolution, the user's file, hostile
catalogues, and ``catalog update`` against the local Hub stand-in (signed with a test key;
the trust rules themselves are tests/store/test_catalog_trust.py)."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from pathlib import Path

import pytest

from localllm import paths
from localllm.errors import DigestMismatch, InvalidRequest, ModelNotFound, PullError
from localllm.store import catalog, catalog_trust, catalog_update
from localllm.store.names import parse_name
from tests.support.catalogkeys import Key, install, new_key, publish, trust
from tests.support.hubstub import HubStub

# The names the issue and every Ollama tutorial use, and what Ollama's :latest means for
# those with several sizes (ollama.com/library/<name>).
ISSUE_NAMES = (
    "llama3.2",
    "llama3.2:1b",
    "qwen3:8b",
    "gemma3:4b",
    "deepseek-r1:7b",
    "mistral",
    "phi4",
    "qwen2.5-coder:7b",
    "nomic-embed-text",
    "mxbai-embed-large",
    "llava",
)
OLLAMA_LATEST = {
    "llama3.2": "3b",
    "llama3.1": "8b",
    "qwen3": "8b",
    "gemma3": "4b",
    "deepseek-r1": "8b",
    "qwen2.5-coder": "7b",
    "qwen2.5": "7b",
    "mistral": "7b",
    "phi4": "14b",
    "llava": "7b",
    "gemma2": "9b",
    "gpt-oss": "20b",
}


@pytest.fixture(autouse=True)
def _default_catalog_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own LOCALLLM_CATALOG_REPO must not leak into these tests."""
    monkeypatch.delenv("LOCALLLM_CATALOG_REPO", raising=False)


def resolve(name: str) -> catalog.Resolved:
    found = catalog.resolve(parse_name(name))
    assert found is not None
    return found


def write_user(text: str) -> Path:
    path = paths.user_catalog()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- the built-in catalogue ----------------------------------------------------------------
def test_builtin_catalogue_has_the_names_people_type() -> None:
    cat = catalog.load()
    assert cat.base == "built-in" and cat.user_file is None
    assert len(cat.families) >= 40
    assert sum(len(f.tags) for f in cat.families.values()) >= 80
    for name in ISSUE_NAMES:
        found = resolve(name)
        assert found.source.is_hf and found.source.tag, name
    for family, tag in OLLAMA_LATEST.items():
        assert resolve(family).name == f"{family}:{tag}"
        assert resolve(f"{family}:latest") == resolve(f"{family}:{tag}")
    for fam in cat.families.values():
        assert fam.latest in fam.tags, fam.name
        for entry in fam.tags.values():
            # A quant (Q4_K_M, F16, MXFP4) or one file: never a bare repo.
            assert entry.source.tag != "latest", fam.name
    # Names compare case-insensitively, and the full registry form is the same name.
    assert resolve("Llama3.2:3B") == resolve("registry.ollama.ai/library/llama3.2:3b")
    assert resolve("gemma3:4b").projector == "mmproj-model-f16.gguf"


def test_this_seasons_families_and_the_rerankers_resolve() -> None:
    """gemma4, qwen3.5, qwen3.6 and the rerankers people ask for (issue 37); an entry whose
    quant file was not seen in a public listing is marked, and only that one."""
    assert resolve("gemma4").source.display == "hf.co/ggml-org/gemma-4-E4B-it-GGUF:Q4_K_M"
    assert resolve("gemma4:26b").source.model == "gemma-4-26B-A4B-it-GGUF"
    assert resolve("qwen3.5").name == "qwen3.5:9b"
    assert resolve("qwen3.5:35b").source.display == "hf.co/unsloth/Qwen3.5-35B-A3B-GGUF:Q4_K_M"
    assert resolve("qwen3.6:35b").source.tag == "UD-Q4_K_XL"
    for name in ("bge-reranker-v2-m3", "qwen3-reranker", "jina-reranker-v2"):
        assert resolve(name).source.tag == "Q8_0", name
    cat = catalog.load()
    unverified = [
        f"{fam.name}:{tag}"
        for fam in cat.families.values()
        for tag, entry in fam.tags.items()
        if not entry.verified
    ]
    assert unverified == ["gemma4:12b"]


def test_an_entry_may_be_marked_unverified() -> None:
    write_user(
        '[models.x]\nlatest = "a"\n'
        'tags.a = { source = "hf.co/u/r:Q4_K_M", verified = false }\n'
        'tags.b = { source = "hf.co/u/r:Q8_0", verified = true }\n'
    )
    tags = catalog.load().families["library/x"].tags
    assert (tags["a"].verified, tags["b"].verified) == (False, True)


def test_ollama_long_tags_swap_the_quant() -> None:
    q8 = resolve("llama3.2:3b-instruct-q8_0")
    assert q8.name == "llama3.2:3b-instruct-q8_0"
    assert q8.source.display == "hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q8_0"
    assert resolve("llama3.2:3b-instruct-fp16").source.tag == "F16"
    assert resolve("qwen3:8b-q4_K_M").source.tag == "Q4_K_M"
    assert resolve("gemma3:4b-it-q8_0").projector == "mmproj-model-f16.gguf"
    # "text" is the base model, which the catalogue does not point at; a file entry has no
    # quant to swap.
    for bad in ("llama3.2:3b-text-q8_0", "phi3:3.8b-instruct-q8_0", "llama3.2:3b-huge"):
        with pytest.raises(ModelNotFound, match="has no tag"):
            resolve(bad)


def test_unknown_names_get_one_line_with_the_closest_and_a_search_hint() -> None:
    with pytest.raises(ModelNotFound) as err:
        catalog.resolve(parse_name("lama3.2"))
    message = str(err.value)
    assert "\n" not in message and err.value.status == 404
    assert message.startswith("model 'lama3.2' is not in the catalogue; closest: llama3.2")
    assert "`localllm search lama3.2`" in message
    with pytest.raises(ModelNotFound, match=r"qwen3 has no tag '9b' .*tags: latest, 0.6b"):
        catalog.resolve(parse_name("qwen3:9b"))
    with pytest.raises(ModelNotFound, match="'someone/thing' is not in the catalogue"):
        catalog.resolve(parse_name("someone/thing"))
    # hf.co names are not the catalogue's business.
    assert catalog.resolve(parse_name("hf.co/someone/Repo-GGUF:Q8_0")) is None


# -- the user's file -------------------------------------------------------------------------
def test_user_file_adds_and_overrides_entries_and_is_reread_when_changed() -> None:
    write_user("""
[models."llama3.2"]
latest = "1b"
tags."3b" = "hf.co/someone/Tiny-GGUF:Q8_0"

[models."team/coder"]
description = "ours"
latest = "small"
tags.small = { source = "hf.co/someone/Coder-GGUF:Q4_K_M", projector = "none" }
""")
    cat = catalog.load()
    assert cat.user_file == paths.user_catalog()
    assert resolve("llama3.2").name == "llama3.2:1b"  # latest moved by the user
    assert resolve("llama3.2:3b").source.display == "hf.co/someone/Tiny-GGUF:Q8_0"
    assert cat.families["library/llama3.2"].tags["3b"].layer == "user"
    assert cat.families["library/llama3.2"].tags["1b"].layer == "built-in"  # kept
    coder = resolve("team/coder")
    assert (coder.name, coder.projector) == ("team/coder:small", "none")
    # Edited: read again, not served from the cache.
    write_user('[models."llama3.2"]\ntags."3b" = "hf.co/someone/Other-GGUF:Q4_K_M"\n')
    assert resolve("llama3.2").name == "llama3.2:3b"
    assert resolve("llama3.2:3b").source.model == "Other-GGUF"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[models.x\n", "not a TOML file"),
        ('[models.x]\ntags.a = "llama3.2"\n', "must be hf.co/"),
        ('[models.x]\ntags.a = "hf.co/someone/Repo-GGUF"\n', "must be hf.co/"),
        ('[models.x]\ntags.a = "hf.co/../etc:Q4_K_M"\n', "not a model name"),
        ('[models."../x"]\ntags.a = "hf.co/u/r:Q4_K_M"\n', "not a model name"),
        ('[models."hf.co/u/r"]\ntags.a = "hf.co/u/r:Q4_K_M"\n', "a family is a plain name"),
        ('[models."x:1b"]\ntags.a = "hf.co/u/r:Q4_K_M"\n', "a family is a plain name"),
        ('[models.x]\ntags.latest = "hf.co/u/r:Q4_K_M"\n', "set latest"),
        ('[models.x]\ntags."a/b" = "hf.co/u/r:Q4_K_M"\n', "not a usable tag"),
        (
            '[models.x]\ntags.a = { source = "hf.co/u/r:Q4_K_M", projector = "../m.gguf" }\n',
            "projector",
        ),
        (
            '[models.x]\ntags.a = { source = "hf.co/u/r:Q4_K_M", url = "http://x" }\n',
            "unknown key 'url'",
        ),
        ('[models.x]\nlatest = "b"\ntags.a = "hf.co/u/r:Q4_K_M"\n', "has no tag 'b'"),
        (
            '[models.x]\ntags.a = { source = "hf.co/u/r:Q4_K_M", verified = "no" }\n',
            "verified: must be true or false",
        ),
        ("[models.x]\ntags.a = 3\n", "must be a source string or a table"),
        ("format = 2\n", "format 2"),
        ('updated = "yesterday"\n', "must be a date"),
        ('mirror = "http://x"\n', "unknown key 'mirror'"),
        ('[models.x]\ntags.A = "hf.co/u/r:Q4_K_M"\ntags.a = "hf.co/u/r:Q8_0"\n', "listed twice"),
    ],
)
def test_a_broken_user_file_is_a_clear_error_naming_the_file(text: str, problem: str) -> None:
    path = write_user(text)
    with pytest.raises(catalog.CatalogError) as err:
        catalog.resolve(parse_name("llama3.2"))
    assert str(err.value).startswith(str(path)) and problem in str(err.value)
    assert err.value.status == 400 and "\n" not in str(err.value)


def test_huge_and_binary_catalogues_are_refused_before_parsing() -> None:
    big = b"# " + b"x" * catalog.MAX_BYTES + b"\n"
    with pytest.raises(catalog.CatalogError, match="larger than 1024 KiB"):
        catalog.parse(big, "big")
    with pytest.raises(catalog.CatalogError, match="not a TOML file"):
        catalog.parse(b"\xff\xfe\x00bad", "binary")
    path = write_user("")
    path.write_bytes(big)
    with pytest.raises(catalog.CatalogError, match="larger than"):
        catalog.load()


# -- the downloaded copy -------------------------------------------------------------------------
BUILTIN_DATE = catalog.parse(catalog.builtin_bytes(), "built-in")[1]
assert BUILTIN_DATE is not None
NEWER = BUILTIN_DATE + dt.timedelta(days=1)


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> Key:
    """A test key pair the verifier trusts, and a clock set to the day after the
    built-in catalogue's date (so a catalogue dated NEWER is not in the future)."""
    k = new_key()
    trust(monkeypatch, k)
    monkeypatch.setattr(catalog_trust, "today", lambda: NEWER)
    return k


def _updated_copy(text: str, key: Key | None) -> Path:
    return install(paths.catalog_data(), text.encode(), key)


def test_a_downloaded_copy_is_used_only_when_newer_than_the_builtin_one(
    key: Key, caplog: pytest.LogCaptureFixture
) -> None:
    _updated_copy(
        f'format = 1\nupdated = {NEWER}\n[models.only]\nlatest = "1b"\n'
        'tags."1b" = "hf.co/bartowski/Only-GGUF:Q4_K_M"\n',
        key,
    )
    cat = catalog.load()
    assert cat.base == "updated" and list(cat.families) == ["library/only"]
    with pytest.raises(ModelNotFound, match="not in the catalogue"):
        catalog.resolve(parse_name("llama3.2"))
    for date in (BUILTIN_DATE - dt.timedelta(days=1), BUILTIN_DATE):
        _updated_copy(
            f'format = 1\nupdated = {date}\n[models.only]\ntags.a = "hf.co/Qwen/r:Q4_K_M"\n',
            key,
        )
        with caplog.at_level(logging.INFO, logger="localllm.store.catalog"):
            assert catalog.load().base == "built-in", date
        assert "using the built-in catalogue" in caplog.text
    # Damaged on disk: a warning, and the built-in one keeps pulls working.
    _updated_copy("[models.only\n", key)
    with caplog.at_level(logging.WARNING, logger="localllm.store.catalog"):
        assert catalog.load().base == "built-in"
    assert "ignoring the downloaded catalogue" in caplog.text


# -- catalog update ---------------------------------------------------------------------------
GOOD = f"""format = 1
updated = {NEWER}
[models.fresh]
latest = "1b"
tags."1b" = "hf.co/bartowski/Fresh-GGUF:Q4_K_M"
""".encode()


def test_update_checks_the_signature_then_installs_atomically(hubstub: HubStub, key: Key) -> None:
    publish(hubstub, GOOD, key)
    result = catalog_update.update()
    assert (result.repo, result.families, result.tags, result.dropped, result.in_use) == (
        "localllm/catalog",
        1,
        1,
        0,
        True,
    )
    assert result.sha256 == hashlib.sha256(GOOD).hexdigest()
    assert result.path.read_bytes() == GOOD
    assert sorted(p.name for p in result.path.parent.iterdir()) == [
        "catalog.toml",
        "catalog.toml.sig",
        "source.json",
    ]
    source = catalog_update.source()
    assert source is not None and source["sha256"] == result.sha256
    assert resolve("fresh").source.model == "Fresh-GGUF"
    assert catalog.load().base == "updated"
    # Nothing was written into the installed package.
    assert catalog.builtin_bytes() != GOOD


@pytest.mark.parametrize(
    "case",
    [
        "no-sig",
        "bad-sig",
        "other-key",
        "tampered",
        "invalid",
        "too-big",
        "no-models",
        "no-repo",
        "future",
        "unknown-publishers",
    ],
)
def test_a_failed_update_keeps_the_catalogue_in_use(hubstub: HubStub, key: Key, case: str) -> None:
    publish(hubstub, GOOD, key)
    catalog_update.update()
    before = (paths.catalog_data() / "catalog.toml").read_bytes()
    repo = "someone/catalog"
    bad = b'format = 1\n[models.x]\ntags.a = "not-hf"\n'
    expect: type[Exception] = catalog.CatalogError
    message = ""
    if case == "no-sig":
        publish(hubstub, GOOD, None, repo=repo)
        expect, message = PullError, "has no catalog.toml.sig"
    elif case == "bad-sig":
        publish(hubstub, GOOD, None, repo=repo, sig=b"<html>nope</html>")
        message = "not an Ed25519 signature"
    elif case == "other-key":
        publish(hubstub, GOOD.replace(b"Fresh", b"Evil"), new_key(), repo=repo)
        message = "does not verify with any key this localllm ships"
    elif case == "tampered":
        publish(hubstub, GOOD.replace(b"Fresh", b"Evil"), None, repo=repo, sig=key.sign(GOOD))
        message = "does not verify"
    elif case == "invalid":
        publish(hubstub, bad, key, repo=repo)
        message = "must be hf.co/"
    elif case == "too-big":
        publish(hubstub, b"#" * (catalog.MAX_BYTES + 10), key, repo=repo)
        message = "larger than"
    elif case == "no-models":
        publish(hubstub, b"format = 1\n", key, repo=repo)
        message = "has no models"
    elif case == "future":
        far = GOOD.replace(str(NEWER).encode(), str(NEWER + dt.timedelta(days=2)).encode())
        publish(hubstub, far, key, repo=repo)
        message = "after today"
    elif case == "unknown-publishers":
        publish(hubstub, GOOD.replace(b"bartowski", b"someone"), key, repo=repo)
        message = "has no models from known publishers"
    else:
        expect, message = PullError, "not found"
    with pytest.raises(expect) as err:
        catalog_update.update(repo)
    assert "\n" not in str(err.value) and message in str(err.value)
    assert (paths.catalog_data() / "catalog.toml").read_bytes() == before
    assert sorted(p.name for p in paths.catalog_data().iterdir()) == [
        "catalog.toml",
        "catalog.toml.sig",
        "source.json",
    ]  # no temp file left behind
    assert resolve("fresh").source.model == "Fresh-GGUF"


def test_update_with_a_pinned_sha256_checks_it_too(hubstub: HubStub, key: Key) -> None:
    publish(hubstub, GOOD, key, repo="someone/cat", file="lib.toml")
    digest = hashlib.sha256(GOOD).hexdigest()
    result = catalog_update.update("hf.co/someone/cat", "lib.toml", f"sha256:{digest}")
    assert (result.repo, result.file) == ("someone/cat", "lib.toml")
    with pytest.raises(DigestMismatch, match="does not match"):
        catalog_update.update("someone/cat", "lib.toml", "0" * 64)
    for bad_repo in ("../x", "a/b/c", "u/..", ""):
        with pytest.raises(InvalidRequest, match="invalid Hugging Face repo"):
            catalog_update.update(bad_repo)
    with pytest.raises(InvalidRequest, match="invalid catalogue file"):
        catalog_update.update("someone/cat", "../secrets")


def test_update_says_when_the_builtin_catalogue_is_as_new_or_newer(
    hubstub: HubStub, key: Key
) -> None:
    for date in (BUILTIN_DATE - dt.timedelta(days=30), BUILTIN_DATE):
        publish(hubstub, GOOD.replace(str(NEWER).encode(), str(date).encode()), key)
        result = catalog_update.update()
        assert result.in_use is False, date
        assert catalog.load().base == "built-in"


def test_update_without_the_hub_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(PullError, match="cannot reach the Hub") as err:
        catalog_update.update()
    assert "\n" not in str(err.value)
    assert not paths.catalog_data().exists()
