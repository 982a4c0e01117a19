"""LOCALLLM_API_KEYS_FILE: the format, the reload within a second, failing closed, the labels
in the access log and /metrics, through the whole app (the live HTTPS daemon and the SDKs are
tests/server/test_tls.py's)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import httpx
import pytest

from localllm.errors import LocalLLMError
from localllm.server import apikeys
from localllm.server.apikeys import KeyRing, check_file, parse
from localllm.server.app import create_app
from localllm.store.local import Store
from tests.server.test_metrics import parse as parse_metrics, value
from tests.support.fake_scheduler import fake_scheduler
from tests.support.routes import BASE_URL

pytestmark = pytest.mark.anyio

ALICE, BOB, CAROL, ENV_KEY = (
    "alice-3f9c0e5e4b2a",
    "bob-9d1e77c0aa41",
    "carol-0b81f0c2e7d5",
    "envkey",
)


def write_keys(path: Path, text: str, mode: int = 0o600) -> Path:
    # Written whole and renamed, as an editor or a deploy script does.
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return path


def test_format_labels_comments_and_bad_lines() -> None:
    keys, problems = parse(
        "# team keys\n"
        "\n"
        f"alice {ALICE}   # laptop\n"
        f"  ci-runner.2@x\t{BOB}\n"
        f"{CAROL}\n"
        "too many words here\n"
        "bad/label somekey\n"
        "label k\u00e9y\n"
        f"again {ALICE}\n"
    )
    assert set(keys.values()) == {"alice", "ci-runner.2@x", apikeys.default_label(CAROL)}
    assert keys[apikeys.digest(ALICE)] == "alice"  # the first label of a repeated key stays
    assert keys[apikeys.digest(BOB)] == "ci-runner.2@x"
    assert apikeys.default_label(CAROL).startswith("key-") and CAROL not in str(keys)
    assert [p.split(":")[0] for p in problems] == ["line 6", "line 7", "line 8", "line 9"]
    # A problem names the line, never its text (it may hold a key).
    assert not any(k in p for p in problems for k in (ALICE, "somekey", "k\u00e9y"))


def test_keyring_reloads_at_most_once_a_second(tmp_path: Path) -> None:
    path = write_keys(tmp_path / "keys", f"alice {ALICE}\n")
    now = [100.0]
    ring = KeyRing(ENV_KEY, str(path), clock=lambda: now[0])
    assert ring.required
    assert ring.label(ALICE) == "alice" and ring.label(ENV_KEY) == "default"
    assert ring.label("nope") is None and ring.label("") is None
    write_keys(path, f"bob {BOB}\n")
    now[0] += 0.5  # within the second: the file is not looked at
    assert ring.label(ALICE) == "alice" and ring.label(BOB) is None
    now[0] += 0.5
    assert ring.label(ALICE) is None and ring.label(BOB) == "bob"
    assert ring.label(ENV_KEY) == "default"


def test_keyring_fails_closed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_keys(tmp_path / "keys", f"alice {ALICE}\n")
    now = [0.0]
    ring = KeyRing(ENV_KEY, str(path), clock=lambda: now[0])
    assert ring.label(ALICE) == "alice"
    for broken in (lambda: os.chmod(path, 0o644), lambda: path.unlink()):
        broken()
        now[0] += 1
        with caplog.at_level(logging.ERROR, "localllm.server"):
            assert ring.label(ALICE) is None
        assert ring.label(ENV_KEY) == "default"  # LOCALLLM_API_KEY is not the file's
        write_keys(path, f"alice {ALICE}\n")
        now[0] += 1
        assert ring.label(ALICE) == "alice"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("other users can read" in e for e in errors)
    assert any("cannot read it" in e for e in errors)
    assert not any(ALICE in e for e in errors)


def test_start_refuses_an_open_or_missing_file(tmp_path: Path) -> None:
    path = write_keys(tmp_path / "keys", f"alice {ALICE}\n", mode=0o644)
    with pytest.raises(LocalLLMError, match=r"other users can read or change it \(mode 644"):
        check_file(str(path))
    os.chmod(path, 0o620)  # the group may change it: as open as a world-readable file
    with pytest.raises(LocalLLMError, match="mode 620"):
        check_file(str(path))
    os.chmod(path, 0o640)  # the group may read it: a service account's group
    assert check_file(str(path)) == 1
    with pytest.raises(LocalLLMError, match="cannot read it"):
        check_file(str(tmp_path / "missing"))


def _client(store: Store) -> httpx.AsyncClient:
    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_keys_labels_reload_and_refusal(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_keys(tmp_path / "keys", f"alice {ALICE}\nbob {BOB}\n")
    monkeypatch.setenv("LOCALLLM_API_KEYS_FILE", str(path))
    monkeypatch.setenv("LOCALLLM_API_KEY", ENV_KEY)
    caplog.set_level(logging.INFO, "localllm")
    async with _client(store) as c:
        assert (await c.get("/api/tags")).status_code == 401
        assert (await c.get("/api/tags", headers=_bearer("wrong"))).status_code == 401
        assert (await c.get("/api/tags", headers=_bearer(ALICE))).status_code == 200
        assert (await c.get("/api/tags", headers={"x-api-key": BOB})).status_code == 200
        assert (await c.get("/v1/models", headers=_bearer(ENV_KEY))).status_code == 200
        assert (await c.get("/health")).status_code == 200  # open, as before

        # Bob's key is taken out, Carol's added: within a second, Bob is refused.
        write_keys(path, f"alice {ALICE}\ncarol {CAROL}\n")
        changed = time.monotonic()
        while True:
            sent = time.monotonic()
            if (await c.get("/api/tags", headers=_bearer(BOB))).status_code != 200:
                break
            assert sent - changed < 1.0, "a removed key still works a second later"
            await _sleep(0.05)
        refused = await c.post("/v1/chat/completions", headers=_bearer(BOB), json={})
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"  # OpenAI's shape on /v1
        assert (await c.get("/api/ps", headers=_bearer(CAROL))).status_code == 200
        assert (await c.get("/api/ps", headers=_bearer(ALICE))).status_code == 200
        scrape = await c.get("/metrics", headers=_bearer(ALICE))
    samples = parse_metrics(scrape.text)
    by_key = "localllm_http_requests_by_key_total"
    assert value(samples, by_key, key_label="alice", status="200") == 2
    assert value(samples, by_key, key_label="bob", status="200") >= 1  # until the reload
    assert value(samples, by_key, key_label="carol", status="200") == 1
    assert value(samples, by_key, key_label="default", status="200") == 1
    # Refused requests carry no label: only the file's labels and "default" become series.
    labels = {dict(lab).get("key_label") for (name, lab) in samples if name == by_key}
    assert labels == {"alice", "bob", "carol", "default"}

    access = [r for r in caplog.records if r.name == "localllm.access"]
    tagged = {(r.getMessage().split()[1], getattr(r, "key_label", None)) for r in access}
    assert ("/api/ps", "carol") in tagged and ("/v1/models", "default") in tagged
    assert ("/api/tags", None) in tagged  # the 401s
    text = "\n".join(r.getMessage() + str(vars(r)) for r in caplog.records)
    assert "carol" in text and not any(k in text for k in (ALICE, BOB, CAROL, ENV_KEY))


async def _sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)
