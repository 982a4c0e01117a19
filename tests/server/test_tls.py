"""The daemon over HTTPS with a team's keys: a CA made by ``trustme``, the real daemon serving
its certificate, and the ollama, openai and anthropic SDKs and the CLI trusting that CA;
keys from LOCALLLM_API_KEYS_FILE, a changed file picked up, labels in the access log and
/metrics.  Also every way a bad certificate, key or keys file stops ``serve`` at start."""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from localllm import paths
from localllm.server.apikeys import default_label
from tests.server.test_apikeys import write_keys
from tests.server.test_metrics import parse as parse_metrics, value
from tests.support import forkserver
from tests.support.daemon import (
    REPO,
    cli_env,
    end_process,
    free_port,
    module_home,
    run_cli,
    stop_pid,
)
from tests.support.models import add_tiny
from tests.support.tinymodel import GREEDY, expected_greedy
from tests.support.variants import PLAIN_TEMPLATE

if TYPE_CHECKING:
    import trustme

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)

ALICE, BOB, CAROL = "alice-7f3a9b1c2d4e", "bob-5e6f7a8b9c0d", "carol-1a2b3c4d5e6f"
GREEDY_OPTS = {"temperature": 0, "seed": 1}


@dataclass
class TlsDaemon:
    url: str
    port: int
    env: dict[str, str]  # the daemon's own environment
    ca: Path
    context: ssl.SSLContext  # trusts the test CA
    keys: Path
    log: Path

    def client_env(self, **extra: str) -> dict[str, str]:
        """A client on the daemon's machine: its environment, the CA and Alice's key."""
        return {**self.env, "LOCALLLM_TLS_CA": str(self.ca), "LOCALLLM_API_KEY": ALICE, **extra}


def _write_pair(folder: Path, ca: trustme.CA, *names: str) -> tuple[Path, Path]:
    issued = ca.issue_cert(*names)
    cert, key = folder / "server.pem", folder / "server.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for extra in issued.cert_chain_pems[1:]:
        extra.write_to_path(str(cert), append=True)
    issued.private_key_pem.write_to_path(str(key))
    os.chmod(key, 0o600)
    return cert, key


@contextmanager
def _serving(tmp: Path, env: dict[str, str], context: ssl.SSLContext) -> Iterator[str]:
    """``localllm serve`` with ``env``; its https URL once it answers."""
    log = tmp / "daemon.log"
    with open(log, "wb") as out:
        proc = forkserver.spawn(["serve"], env, cwd=REPO, stdout=out, stderr=out)
    url = f"https://127.0.0.1:{env['LOCALLLM_HOST'].rpartition(':')[2]}"
    try:
        deadline = time.monotonic() + 30
        while not _answers(url, context):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the HTTPS daemon did not come up"
            time.sleep(0.1)
        yield url
    finally:
        end_process(proc)


def _answers(url: str, context: ssl.SSLContext) -> bool:
    try:
        return httpx.get(url + "/", verify=context, trust_env=False, timeout=1).is_success
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsDaemon]:
    import trustme

    ca = trustme.CA()
    with module_home(tmp_path_factory, "tls", LOCALLLM_CONTEXT_LENGTH="512") as tmp:
        add_tiny(tmp, "tiny", chat_template=PLAIN_TEMPLATE)
        cert, key = _write_pair(tmp, ca, "127.0.0.1", "localhost")
        ca_path = tmp / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_path))
        keys = write_keys(tmp / "keys", f"alice {ALICE}\nbob {BOB}\n{CAROL}\n")
        port = free_port()
        env = cli_env(
            port,
            LOCALLLM_TLS_CERT=str(cert),
            LOCALLLM_TLS_KEY=str(key),
            LOCALLLM_API_KEYS_FILE=str(keys),
        )
        context = ssl.create_default_context(cafile=str(ca_path))
        with _serving(tmp, env, context) as url:
            yield TlsDaemon(url, port, env, ca_path, context, keys, tmp / "daemon.log")


def test_sdks_over_https_with_the_ca(tls: TlsDaemon) -> None:
    import anthropic
    import ollama
    import openai

    auth = {"Authorization": f"Bearer {ALICE}"}
    oll = ollama.Client(host=tls.url, verify=tls.context, headers=auth, trust_env=False)
    try:
        user = [{"role": "user", "content": "c"}]
        assert oll.chat(model="tiny", messages=user, options=GREEDY_OPTS).message.content == (
            expected_greedy("c")
        )
        assert [m.model for m in oll.list().models] == ["tiny:latest"]
    finally:
        oll.close()

    http = openai.DefaultHttpxClient(verify=tls.context, trust_env=False, timeout=60)
    with openai.OpenAI(
        base_url=tls.url + "/v1", api_key=BOB, http_client=http, max_retries=0
    ) as oai:
        chat = oai.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "a"}], temperature=0
        )
        assert chat.choices[0].message.content == GREEDY["a"]

    http = anthropic.DefaultHttpxClient(verify=tls.context, trust_env=False, timeout=60)
    with anthropic.Anthropic(
        base_url=tls.url, api_key=CAROL, http_client=http, max_retries=0
    ) as ant:
        msg = ant.messages.create(
            model="tiny",
            max_tokens=100,
            messages=[{"role": "user", "content": "b"}],
            extra_body={"temperature": 0},
        )
        assert msg.content[0].type == "text" and msg.content[0].text == expected_greedy("b")

    metrics = httpx.get(tls.url + "/metrics", verify=tls.context, headers=auth, trust_env=False)
    samples = parse_metrics(metrics.text)
    by_key = "localllm_http_requests_by_key_total"
    assert value(samples, by_key, key_label="alice", status="200") >= 2
    assert value(samples, by_key, key_label="bob", status="200") >= 1
    assert value(samples, by_key, key_label=default_label(CAROL), status="200") >= 1
    log = tls.log.read_text()
    assert "POST /api/chat 200" in log and "key_label=alice" in log and "key_label=bob" in log
    assert not any(key in log for key in (ALICE, BOB, CAROL))  # labels only, never a key


def test_an_untrusted_certificate_or_plain_http_gets_nowhere(tls: TlsDaemon) -> None:
    import openai

    http = openai.DefaultHttpxClient(trust_env=False, timeout=10)  # the usual CAs only
    with openai.OpenAI(
        base_url=tls.url + "/v1", api_key=BOB, http_client=http, max_retries=0
    ) as oai:
        with pytest.raises(openai.APIConnectionError) as caught:
            oai.models.list()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(caught.value.__cause__)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{tls.port}/api/tags", trust_env=False, timeout=5)


def test_cli_over_https(tls: TlsDaemon) -> None:
    # On the daemon's machine: its environment (the certificate set) means https.
    listed = run_cli("list", env=tls.client_env(), timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "tiny:latest" in listed.stdout
    # Elsewhere: the https:// address, in our variable or in Ollama's.
    remote = {k: v for k, v in tls.client_env().items() if not k.startswith("LOCALLLM_TLS_")}
    remote["LOCALLLM_TLS_CA"] = str(tls.ca)
    remote["LOCALLLM_HOST"] = tls.url
    ps = run_cli("ps", env=remote, timeout=60)
    assert ps.returncode == 0, ps.stderr
    assert ps.stdout.startswith("NAME")
    del remote["LOCALLLM_HOST"]
    remote["OLLAMA_HOST"] = tls.url
    listed = run_cli("list", env=remote, timeout=60)
    assert listed.returncode == 0 and "tiny:latest" in listed.stdout, listed.stderr
    # Without the CA: one line that says what to set, and no daemon started beside it.
    del remote["LOCALLLM_TLS_CA"]
    refused = run_cli("list", env=remote, timeout=60)
    assert refused.returncode != 0
    assert "not trusted" in refused.stderr and "LOCALLLM_TLS_CA" in refused.stderr
    assert "Starting localllm daemon" not in refused.stderr
    wrong_key = run_cli("ps", env=tls.client_env(LOCALLLM_API_KEY="guess"), timeout=60)
    assert wrong_key.returncode != 0 and "API key" in wrong_key.stderr


def test_a_changed_keys_file_is_picked_up(tls: TlsDaemon) -> None:
    import openai

    http = openai.DefaultHttpxClient(verify=tls.context, trust_env=False, timeout=60)
    with openai.OpenAI(
        base_url=tls.url + "/v1", api_key=BOB, http_client=http, max_retries=0
    ) as oai:
        assert [m.id for m in oai.models.list()] == ["tiny:latest"]
        write_keys(tls.keys, f"alice {ALICE}\ndave {CAROL}\n")  # Bob out; Carol is dave now
        time.sleep(1.1)
        with pytest.raises(openai.AuthenticationError):
            oai.models.list()
    http = openai.DefaultHttpxClient(verify=tls.context, trust_env=False, timeout=60)
    with openai.OpenAI(
        base_url=tls.url + "/v1", api_key=CAROL, http_client=http, max_retries=0
    ) as oai:
        assert [m.id for m in oai.models.list()] == ["tiny:latest"]
    time.sleep(0.2)  # the access line follows the answer
    assert "/v1/models 200" in tls.log.read_text() and "key_label=dave" in tls.log.read_text()


def _refusals(tmp: Path) -> dict[str, tuple[dict[str, str], str]]:
    """Settings ``serve`` must refuse at start, each with what its message must say."""
    import trustme
    from cryptography.hazmat.primitives import serialization

    cert, key = _write_pair(tmp, trustme.CA(), "127.0.0.1")
    other = tmp / "other"
    other.mkdir()
    _, other_key = _write_pair(other, trustme.CA(), "127.0.0.1")
    locked = tmp / "locked.key"
    plain = serialization.load_pem_private_key(key.read_bytes(), password=None)
    locked.write_bytes(
        plain.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    open_keys = write_keys(tmp / "keys", f"alice {ALICE}\n", mode=0o644)
    pair = {"LOCALLLM_TLS_CERT": str(cert), "LOCALLLM_TLS_KEY": str(key)}
    return {
        "cert only": ({"LOCALLLM_TLS_CERT": str(cert)}, "LOCALLLM_TLS_KEY is not"),
        "key only": ({"LOCALLLM_TLS_KEY": str(key)}, "LOCALLLM_TLS_CERT is not"),
        "unreadable": ({**pair, "LOCALLLM_TLS_CERT": str(tmp / "nope.pem")}, "cannot read it"),
        "mismatch": ({**pair, "LOCALLLM_TLS_KEY": str(other_key)}, "does not belong"),
        "not pem": ({**pair, "LOCALLLM_TLS_CERT": str(open_keys)}, "not a PEM"),
        "encrypted": ({**pair, "LOCALLLM_TLS_KEY": str(locked)}, "is encrypted"),
        "https, no cert": ({"LOCALLLM_HOST": "https://127.0.0.1:1"}, "asks for https://"),
        "open keys file": ({"LOCALLLM_API_KEYS_FILE": str(open_keys)}, "chmod 600"),
    }


def test_serve_refuses_a_bad_certificate_key_or_keys_file(tmp_path: Path) -> None:
    for case, (settings, says) in _refusals(tmp_path).items():
        env = cli_env(free_port(), **settings)
        done = run_cli("serve", env=env, timeout=60)
        assert done.returncode != 0, case
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("Error: ") and says in last, (case, done.stderr)
        assert "Traceback" not in done.stderr, case


def test_a_client_starts_an_https_daemon(tmp_path: Path) -> None:
    import trustme

    ca = trustme.CA()
    cert, key = _write_pair(tmp_path, ca, "127.0.0.1")
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    port = free_port()
    tls = {"LOCALLLM_TLS_CERT": str(cert), "LOCALLLM_TLS_KEY": str(key)}
    # https:// with no certificate for the daemon it would start: that daemon says so.
    bare = run_cli("list", env=cli_env(port, LOCALLLM_HOST=f"https://127.0.0.1:{port}"))
    assert bare.returncode == 1 and "asks for https://" in bare.stderr
    env = cli_env(port, LOCALLLM_TLS_CA=str(ca_path), **tls)
    pid_file = paths.run_dir() / "localllm.pid"
    try:
        out = run_cli("list", env=env, timeout=90)
        assert out.returncode == 0, out.stderr
        assert f"Starting localllm daemon at https://127.0.0.1:{port}" in out.stderr
        context = ssl.create_default_context(cafile=str(ca_path))
        got = httpx.get(f"https://127.0.0.1:{port}/", verify=context, trust_env=False)
        assert got.text == "localllm is running"
        again = run_cli("ps", env=env, timeout=60)
        assert again.returncode == 0 and "Starting" not in again.stderr, again.stderr
    finally:
        if pid_file.is_file():
            stop_pid(int(pid_file.read_text()))


@pytest.mark.parametrize(
    ("settings", "url"),
    [
        ({"LOCALLLM_HOST": "127.0.0.1:9"}, "http://127.0.0.1:9"),
        ({"LOCALLLM_HOST": "https://box.lan:9"}, "https://box.lan:9"),
        ({"LOCALLLM_HOST": "https://box.lan"}, "https://box.lan:443"),
        ({"OLLAMA_HOST": "https://box.lan:9"}, "https://box.lan:9"),
        ({"LOCALLLM_HOST": "0.0.0.0:9", "LOCALLLM_TLS_CERT": "c.pem"}, "https://127.0.0.1:9"),
    ],
)
def test_the_client_url_says_https(
    settings: dict[str, str], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from localllm import config
    from localllm.api.daemon import http_kwargs

    for name, text in settings.items():
        monkeypatch.setenv(name, text)
    assert config.client_base_url() == url
    verify = http_kwargs(url)["verify"]
    assert verify is False if url.startswith("http://") else isinstance(verify, ssl.SSLContext)


def test_a_bad_ca_bundle_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from localllm.api.client import Client
    from localllm.errors import LocalLLMError

    (tmp_path / "ca.pem").write_text("not a certificate\n")
    monkeypatch.setenv("LOCALLLM_TLS_CA", str(tmp_path / "ca.pem"))
    with pytest.raises(LocalLLMError, match=r"LOCALLLM_TLS_CA=.*not a readable PEM CA bundle"):
        Client("https://127.0.0.1:9")
