"""Through the real daemon: a hostile chat template in a GGUF fails that model's requests with a
400 naming the limit, never stalls or exhausts the daemon, and ``/api/create`` refuses it.

``big`` asks a filter for a 3,000,000-character value (before the limits: rendered, and
at a larger width, gigabytes); ``slow`` makes one filter call run for seconds of Python
(before: the deadline was only checked after it, 6.6 s later).  Meanwhile ``/health``
answers, and once the request has failed the daemon is idle again.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.daemon import Daemon, module_home, start_daemon
from tests.support.models import add_tiny
from tests.support.tinymodel import make_tiny_model
from tests.support.variants import GREEDY_OPTS

CONTENTS = "{% for m in messages %}{{ m.content }}{% endfor %}"
BIG = '{% set pad = "x"|center(3000000) %}' + CONTENTS
SLOW = CONTENTS + '{{ ("a" * 1000000)|wordwrap(2)|length }}'
REFUSES = "{{ raise_exception('this template takes no chats') }}"
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_home(
        tmp_path_factory, "daemon", LOCALLLM_NUM_PARALLEL="1", LOCALLLM_CONTEXT_LENGTH="256"
    ) as tmp_path:
        add_tiny(tmp_path, "ok", chat_template=CONTENTS)
        # Stored as a pull stores them: no /api/create checks on the way in.
        add_tiny(tmp_path, "big", chat_template=BIG)
        add_tiny(tmp_path, "slow", chat_template=SLOW)
        with start_daemon(tmp_path) as daemon:
            yield daemon


def post(d: Daemon, path: str, body: dict[str, Any], timeout: float = 60) -> httpx.Response:
    return httpx.post(d.url + path, json=body, trust_env=False, timeout=timeout)


def chat(d: Daemon, model: str) -> httpx.Response:
    return post(
        d, "/api/chat", {"model": model, "messages": HELLO, "stream": False, "options": GREEDY_OPTS}
    )


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def test_a_template_asking_for_a_huge_value_is_a_400_on_every_route(d: Daemon) -> None:
    r = chat(d, "big")
    assert r.status_code == 400
    assert r.json()["error"].startswith(
        "chat template limit: the width given to center is 3,000,000; at most 65,536"
    ), r.text
    gen = post(d, "/api/generate", {"model": "big", "prompt": "hi", "stream": False})
    assert gen.status_code == 400 and "chat template limit" in gen.json()["error"]
    oai = post(d, "/v1/chat/completions", {"model": "big", "messages": HELLO})
    assert oai.status_code == 400
    assert "chat template limit" in oai.json()["error"]["message"]
    assert chat(d, "ok").status_code == 200  # the daemon and other models are fine


def test_a_template_that_burns_cpu_fails_at_the_deadline_and_stops(d: Daemon) -> None:
    health: list[float] = []
    result: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: result.append(chat(d, "slow")))
    start = time.monotonic()
    worker.start()
    while worker.is_alive() and time.monotonic() - start < 20:
        t = time.monotonic()
        assert httpx.get(d.url + "/health", trust_env=False, timeout=10).status_code == 200
        health.append(time.monotonic() - t)
        time.sleep(0.1)
    worker.join(30)
    took = time.monotonic() - start
    r = result[0]
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "chat template limit: rendering took longer than 2 s"
    assert took < 5, f"failed only after {took:.1f} s"
    assert health and max(health) < 0.5, health
    # The render stopped with the request: the daemon does nothing now.
    before = cpu_seconds(d.proc.pid)
    time.sleep(1.0)
    assert cpu_seconds(d.proc.pid) - before < 0.3
    assert chat(d, "ok").status_code == 200


def test_create_refuses_a_hostile_template_layer(d: Daemon) -> None:
    r = post(d, "/api/create", {"model": "made", "from": "ok", "template": BIG})
    assert r.status_code == 400
    assert r.json()["error"].startswith(
        "invalid TEMPLATE: chat template limit: the width given to center"
    ), r.text
    assert (
        httpx.post(d.url + "/api/show", json={"model": "made"}, trust_env=False).status_code == 404
    )


def upload_gguf(d: Daemon, tmp_path: Path, template: str) -> str:
    data = make_tiny_model(tmp_path, chat_template=template).read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    r = httpx.post(f"{d.url}/api/blobs/{digest}", content=data, trust_env=False, timeout=60)
    assert r.status_code in (200, 201), r.text
    return digest


def test_create_refuses_a_gguf_whose_own_template_is_hostile(d: Daemon, tmp_path: Path) -> None:
    digest = upload_gguf(d, tmp_path / "big", BIG)
    r = post(d, "/api/create", {"model": "imported", "files": {"m.gguf": digest}})
    assert r.status_code == 400
    assert r.json()["error"] == (
        "the GGUF's chat template (tokenizer.chat_template) cannot be used: chat template "
        "limit: the width given to center is 3,000,000; at most 65,536"
    ), r.text
    # A template that merely refuses the sample chat is not hostile: the model is created
    # and its chats get the template's own message.
    digest = upload_gguf(d, tmp_path / "refuses", REFUSES)
    r = post(d, "/api/create", {"model": "refuses", "files": {"m.gguf": digest}, "stream": False})
    assert r.status_code == 200, r.text
    refused = chat(d, "refuses")
    assert refused.status_code == 400
    assert "this template takes no chats" in refused.json()["error"]
