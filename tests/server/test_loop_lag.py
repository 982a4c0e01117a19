"""The standing guard of issue #26: no abusive body keeps the daemon's event loop busy.

For each body below, a real daemon (real runners, the tiny models) gets the body
while a second thread asks ``/health`` every 10 ms; no answer may take 100 ms or
more.  The daemon's own measure, ``localllm_event_loop_lag_max_seconds`` in
``/metrics``, must agree.  A body that blocks the loop fails here on every try;
a try can only be unlucky when this 2-core machine stalls the whole daemon for
100 ms, so a body gets a second try before it fails.

Bodies are scaled to take seconds here; the ones they stand for are in the
issue (64 MiB bodies; Go templates are capped at 256 KiB, Jinja ones at 64 KiB).
Bodies in UTF-16 or UTF-32 must be refused as not UTF-8, and a flood of searches
(``/api/search`` on a slow Hub stand-in) must not slow ``/health`` either.
"""

from __future__ import annotations

import base64
import io
import json
import random
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, own_daemon
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub
from tests.support.models import import_gguf
from tests.support.rerankmodel import make_rerank_model
from tests.support.scriptmodel import make_script_model
from tests.support.tinymodel import make_tiny_model
from tests.support.variants import stock_vision
from tests.support.visionmodel import png

pytestmark = pytest.mark.slow
LIMIT_S = 0.1
Body = Callable[[], tuple[str, bytes]]  # -> (path, body)
T = TypeVar("T")
FLOOD = 40


@pytest.fixture(scope="module")
def slow_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubStub]:
    """The Hub stand-in the daemon searches: repos with an "e" whose trees answer slowly."""
    tmp = tmp_path_factory.mktemp("lag-hub")
    stub = HubStub(tmp / "hub").start()
    gguf = write_gguf(tmp / "model.gguf", Shape(n_layers=2), "Q8_0")
    for i in range(4):
        repo = f"someone/model-{i}-GGUF"
        stub.add_file(repo, "model-Q8_0.gguf", gguf)
        stub.api_delay_s[repo] = 0.1
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, slow_hub: HubStub) -> Iterator[Daemon]:
    def stock(tmp: Path) -> None:
        stock_vision(tmp)
        store = Store(paths.models())
        embed = make_tiny_model(tmp / "gguf-embed", pooling="mean")
        import_gguf(store, parse_name("tiny-embed"), [embed])
        import_gguf(store, parse_name("tiny-rerank"), [make_rerank_model(tmp / "rerank")])
        call = make_script_model(
            tmp / "gguf-call", {"[x]": LONG_CALL}, chat_template=CALL_TEMPLATE, longest=2048
        )
        import_gguf(store, parse_name("lag-call"), [call])

    with own_daemon(
        tmp_path_factory,
        "lag-daemon",
        stock,
        LOCALLLM_CONTEXT_LENGTH="512",
        HF_ENDPOINT=slow_hub.url,
    ) as d:
        # Loaded before any body arrives: a load is the scheduler's work, not a body's.
        r = httpx.post(
            d.url + "/api/generate",
            json={"model": "tiny", "prompt": "hi", "stream": False, "options": {"num_predict": 1}},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        yield d


def _json(path: str, doc: dict[str, Any]) -> tuple[str, bytes]:
    return path, json.dumps(doc).encode()


def _chat(content: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "stream": False,
        "options": {"num_predict": 1},
        "messages": [{"role": "user", "content": content}],
        **extra,
    }


def deep_json() -> tuple[str, bytes]:
    return "/api/chat", b'{"model": "tiny", "messages": ' + b"[" * 500_000 + b"]" * 500_000 + b"}"


def utf16_deep_json() -> tuple[str, bytes]:
    # UTF-16 whose "Ģ" (bytes 22 01) hid the brackets from a depth scan reading UTF-8: a
    # schema 900 deep (json.loads' own limit is ~1,000) for the grammar builder's recursion.
    schema = '{"type": "array", "items": ' * 900 + "{}" + "}" * 900
    text = '{"model": "tiny", "\u0122": 1, "messages": [], "format": ' + schema + "}"
    return "/api/chat", text.encode("utf-16-le")


def utf32_deep_json() -> tuple[str, bytes]:
    # The same in UTF-32 ("Ģ" is 22 01 00 00): under SMALL, json.loads' path.
    return "/api/chat", utf16_deep_json()[1].decode("utf-16-le").encode("utf-32-le")


def _deep_text() -> str:
    return '{"model": "tiny", "messages": ' + "[" * 500_000 + "]" * 500_000 + "}"


def utf16_large_deep_json() -> tuple[str, bytes]:
    # deep_json in UTF-16 (2 MB): the large body's path, where every other byte is a NUL.
    return "/api/chat", _deep_text().encode("utf-16-le")


def utf32_large_deep_json() -> tuple[str, bytes]:
    return "/api/chat", _deep_text().encode("utf-32-be")


def escape_storm() -> tuple[str, bytes]:
    # The reproduction from the issue at 1 MB (it froze /health for 9.7 s at 48 KB).
    return "/api/generate", b"[" * 101 + b'"' + b'\\"' * 500_000


def escaped_prompt() -> tuple[str, bytes]:
    # A valid 4 MB string of escapes: read a slice at a time, rendered, sent to the runner.
    return _json(
        "/api/generate",
        {
            "model": "tiny",
            "raw": True,
            "stream": False,
            "prompt": '"\\\n' * 1_000_000,
            "options": {"num_predict": 1},
        },
    )


def container_bomb() -> tuple[str, bytes]:
    return "/api/chat", b'{"model": "tiny", "messages": [' + b"[]," * 3_000_000 + b"[]]}"


def many_values() -> tuple[str, bytes]:
    return _json(
        "/api/generate",
        {
            "model": "tiny",
            "prompt": "hi",
            "stream": False,
            "context": [1] * 900_000,
            "options": {"num_predict": 1},
        },
    )


def many_messages() -> tuple[str, bytes]:
    doc = _chat("x")
    doc["messages"] = [{"role": "user", "content": "x"}] * 9_000
    return _json("/api/chat", doc)


def giant_schema() -> tuple[str, bytes]:
    props = {f"{i:04d}" + "p" * 296: {"type": "string"} for i in range(800)}
    return _json("/api/chat", _chat("x", format={"type": "object", "properties": props}))


def many_tools() -> tuple[str, bytes]:
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool{i}",
                "description": "d" * 200,
                "parameters": {
                    "type": "object",
                    "properties": {f"arg{j}" + "a" * 100: {"type": "string"} for j in range(40)},
                },
            },
        }
        for i in range(200)
    ]
    return _json(
        "/v1/chat/completions",
        {
            "model": "tiny",
            "max_tokens": 1,
            "tools": tools,
            "tool_choice": "required",
            "messages": [{"role": "user", "content": "x"}],
        },
    )


# A model that answers "x" with a 1 MB Hermes call in 2 KB pieces (its template names
# <tool_call>, so the reply is parsed as Hermes').
CALL_TEMPLATE = "{% for m in messages %}[{{ m.content }}]{% endfor %}{# <tool_call> #}"
LONG_CALL = (
    '<tool_call>\n{"name": "write", "arguments": {"text": "'
    + "".join(f"line {i:06d} {{[(x)]}} " + "y" * 32 + "\\n" for i in range(18_000))
    + '"}}\n</tool_call>'
)


def long_tool_call() -> tuple[str, bytes]:
    # The call region is read again as each piece arrives: from where the last read
    # stopped, not from its start (a whole read of 1 MB took the loop a second a piece).
    tool = {
        "type": "function",
        "function": {
            "name": "write",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    }
    return _json(
        "/api/chat",
        {
            "model": "lag-call",
            "stream": True,
            "tools": [tool],
            "options": {"temperature": 0},
            "messages": [{"role": "user", "content": "x"}],
        },
    )


def giant_go_template() -> tuple[str, bytes]:
    template = "{{ if .System }}{{ .System }}{{ end }}{{ .Prompt }}" * 4_900  # the cap
    return _json(
        "/api/create", {"model": "lag-go", "from": "tiny", "template": template, "stream": False}
    )


def giant_jinja_template() -> tuple[str, bytes]:
    template = "{% for m in messages %}{{ m.content }}{% endfor %}" * 1_300  # the cap
    return _json(
        "/api/create", {"model": "lag-jinja", "from": "tiny", "template": template, "stream": False}
    )


def many_images() -> tuple[str, bytes]:
    # Sixteen flat 2000x1500 PNGs: a few KB each on the wire, 9 MB each decoded.
    image = base64.b64encode(png(2000, 1500)).decode()
    doc = {
        "model": "tiny-vision",
        "stream": False,
        "options": {"num_predict": 1},
        "messages": [{"role": "user", "content": "x", "images": [image] * 16}],
    }
    return _json("/api/chat", doc)


def large_images() -> tuple[str, bytes]:
    # 24 MB of base64 that is not a picture: parsed, decoded, checked and refused.
    junk = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(6 << 20)).decode()
    doc = {
        "model": "tiny-vision",
        "stream": False,
        "messages": [{"role": "user", "content": "x", "images": [junk] * 3}],
    }
    return _json("/api/chat", doc)


def noise_png(side: int) -> bytes:
    """An RGB PNG of random pixels, stored uncompressed: ``3 * side**2`` bytes on the wire."""
    rng = random.Random(side)
    rows = b"".join(b"\x00" + rng.randbytes(3 * side) for _ in range(side))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 0))
        + chunk(b"IEND", b"")
    )


def real_images() -> tuple[str, bytes]:
    # Three 4 MB pictures a model really sees: decoded, sent to the runner, encoded there.
    image = base64.b64encode(noise_png(1200)).decode()
    doc = {
        "model": "tiny-vision",
        "stream": False,
        "options": {"num_predict": 1},
        "messages": [{"role": "user", "content": "x", "images": [image] * 3}],
    }
    return _json("/api/chat", doc)


def _webp(im: Any, **kw: Any) -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.Image.save(im, out, "WEBP", **kw)
    return base64.b64encode(out.getvalue()).decode()


def _vision_chat(*images: str) -> tuple[str, bytes]:
    return _json(
        "/api/chat",
        {
            "model": "tiny-vision",
            "stream": False,
            "options": {"num_predict": 1},
            "messages": [{"role": "user", "content": "x", "images": list(images)}],
        },
    )


def webp_images() -> tuple[str, bytes]:
    # Three 2000x1500 photos as WebP (what a browser sends): decoded and re-encoded in
    # the daemon (as JPEGs: noise is too large as PNG), then sent to the runner.
    from PIL import Image

    return _vision_chat(
        *[_webp(Image.effect_noise((2000, 1500), 60).convert("RGB"), quality=80)] * 3
    )


def corrupt_webp() -> tuple[str, bytes]:
    from PIL import Image

    good = base64.b64decode(_webp(Image.new("RGB", (1000, 1000)), lossless=True))
    return _vision_chat(base64.b64encode(good[:30] + bytes(4096)).decode())


def webp_bomb() -> tuple[str, bytes]:
    # A 16383x16383 stream (34 bytes, 1 GiB decoded) under a canvas that declares 1x1:
    # past the header checks, to libwebp, which refuses the mismatch.  (Declaring the
    # size outright is refused from the header: test_vision_api.py.)
    from PIL import Image

    bomb = base64.b64decode(_webp(Image.new("RGB", (16383, 16383)), lossless=True, method=0))
    canvas = b"VP8X" + struct.pack("<I", 10) + bytes(10)
    body = b"WEBP" + canvas + bomb[12:]
    lie = b"RIFF" + struct.pack("<I", len(body)) + body
    return _vision_chat(*[base64.b64encode(lie).decode()] * 16)


def long_prompt() -> tuple[str, bytes]:
    # 24 MB of text for a 512-token context: cut to fit, never tokenized whole.
    return _json(
        "/api/generate",
        {
            "model": "tiny",
            "raw": True,
            "stream": False,
            "prompt": "ab c\n" * 5_000_000,
            "options": {"num_predict": 1},
        },
    )


def tokenize_text() -> tuple[str, bytes]:
    # 500 KB of text, about the limit: half a million ids back (one a character).
    return _json("/api/tokenize", {"model": "tiny", "text": "ab c\n" * 100_000})


def detokenize_ids() -> tuple[str, bytes]:
    # Half a million ids (the limit), checked against the vocabulary, sent to the runner.
    return _json("/api/detokenize", {"model": "tiny", "tokens": [5] * 500_000})


def embed_batch() -> tuple[str, bytes]:
    # 20,000 vectors back from the runner, normalised and rendered as JSON.
    return _json("/api/embed", {"model": "tiny-embed", "input": ["abc"] * 20_000})


def rerank_too_many() -> tuple[str, bytes]:
    # 10,000 documents: parsed and checked in a thread, refused (at most 4,096).
    return _json(
        "/v1/rerank",
        {"model": "tiny-rerank", "query": "find x", "documents": ["some text " * 20] * 10_000},
    )


def rerank_batch() -> tuple[str, bytes]:
    # 4,096 documents (the most one request takes): scored in the runner, 256 pairs a
    # call, sorted, rendered with each document.
    return _json(
        "/v1/rerank",
        {
            "model": "tiny-rerank",
            "query": "find x",
            "return_documents": True,
            "documents": [f"doc {i} xyz" for i in range(4_096)],
        },
    )


def think_budget_message() -> tuple[str, bytes]:
    # A 16 MB thinking-budget message: refused by its length (2,000 characters at most).
    return _json(
        "/api/chat",
        {
            "model": "tiny",
            "stream": False,
            "messages": [{"role": "user", "content": "x"}],
            "options": {"think_budget": 1, "think_budget_message": "x" * 16_000_000},
        },
    )


def think_budget_choices() -> tuple[str, bytes]:
    # 16 choices, each with a budget of 0 and the longest message (tokenized in the
    # runner for each), through the OpenAI converter and llama-server's field names.
    return _json(
        "/v1/chat/completions",
        {
            "model": "tiny",
            "n": 16,
            "max_tokens": 4,
            "reasoning_budget_tokens": 0,
            "reasoning_budget_message": "y " * 1000,
            "reasoning_effort": "minimal",
            "messages": [{"role": "user", "content": "x"}],
        },
    )


BODIES: list[Body] = [
    deep_json,
    utf16_deep_json,
    utf32_deep_json,
    utf16_large_deep_json,
    utf32_large_deep_json,
    escape_storm,
    escaped_prompt,
    container_bomb,
    many_values,
    many_messages,
    giant_schema,
    many_tools,
    giant_go_template,
    giant_jinja_template,
    many_images,
    large_images,
    real_images,
    webp_images,
    corrupt_webp,
    webp_bomb,
    long_prompt,
    embed_batch,
    tokenize_text,
    detokenize_ids,
    long_tool_call,
    rerank_too_many,
    rerank_batch,
    think_budget_message,
    think_budget_choices,
]
# Refused as not UTF-8 (RFC 8259), whatever their nesting.
NOT_UTF8: set[Body] = {
    utf16_deep_json,
    utf32_deep_json,
    utf16_large_deep_json,
    utf32_large_deep_json,
}


def _health_while(d: Daemon, path: str, body: bytes) -> tuple[float, httpx.Response]:
    """The slowest ``/health`` answer while ``body`` is in flight, and its response."""
    return _health_during(
        d,
        lambda: httpx.post(
            d.url + path, content=body, timeout=300, headers={"Content-Type": "application/json"}
        ),
    )


def _health_during(d: Daemon, work: Callable[[], T]) -> tuple[float, T]:
    """The slowest ``/health`` answer while ``work()`` runs, and what it returned."""
    worst = [0.0]
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=d.url, timeout=30) as client:
            client.get("/health")  # connected before the body goes
            while not done.is_set():
                start = time.perf_counter()
                client.get("/health").raise_for_status()
                worst[0] = max(worst[0], time.perf_counter() - start)
                done.wait(0.01)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        time.sleep(0.05)
        result = work()
        time.sleep(0.05)
    finally:
        done.set()
        poller.join()
    return worst[0], result


@pytest.mark.parametrize("make", BODIES, ids=lambda f: f.__name__)
def test_health_answers_while_an_abusive_body_is_in_flight(daemon: Daemon, make: Body) -> None:
    path, body = make()
    for _ in range(2):  # a second try only for a stall of the whole machine
        worst, response = _health_while(daemon, path, body)
        # Every body gets an answer: refused with a reason, or served.
        assert response.status_code in (200, 400, 413), response.text[:500]
        if response.status_code == 400:
            assert response.json()["error"], response.text[:500]
        if make in NOT_UTF8:
            assert response.status_code == 400, response.text[:500]
            assert "not UTF-8" in response.json()["error"], response.text[:500]
        if worst < LIMIT_S:
            break
    assert worst < LIMIT_S, f"/health took {worst * 1000:.0f} ms during {make.__name__}"


def test_health_answers_during_a_search_flood(daemon: Daemon, slow_hub: HubStub) -> None:
    # "e" is in dozens of catalogue names and in every repo of the stand-in.  One client
    # for all: each new one loads the CA bundle holding this process's GIL (~25 ms), which
    # the poller here would measure as the daemon's lag.
    client = daemon.keep(httpx.Client(base_url=daemon.url, timeout=120))

    def flood() -> list[httpx.Response]:
        with ThreadPoolExecutor(FLOOD) as pool:
            return list(
                pool.map(lambda _: client.get("/api/search", params={"q": "e"}), range(FLOOD))
            )

    for _ in range(2):  # a second try only for a stall of the whole machine
        trees = slow_hub.count("GET", "/tree/")
        worst, answers = _health_during(daemon, flood)
        assert [r.status_code for r in answers] == [200] * FLOOD, answers[0].text[:500]
        assert all(len(r.json()["models"]) == 4 for r in answers)
        assert slow_hub.count("GET", "/tree/") - trees == 4 * FLOOD  # the slow part ran
        if worst < LIMIT_S:
            break
    assert worst < LIMIT_S, f"/health took {worst * 1000:.0f} ms during {FLOOD} searches"


def test_metrics_report_the_loop_lag(daemon: Daemon) -> None:
    text = httpx.get(daemon.url + "/metrics", timeout=30).text
    values = {
        name: float(value)
        for name, value in re.findall(
            r"^(localllm_event_loop_lag_(?:max|p99)_seconds) (\S+)$", text, re.M
        )
    }
    assert set(values) == {
        "localllm_event_loop_lag_max_seconds",
        "localllm_event_loop_lag_p99_seconds",
    }
    assert 0 < values["localllm_event_loop_lag_p99_seconds"]
    assert (
        values["localllm_event_loop_lag_p99_seconds"]
        <= values["localllm_event_loop_lag_max_seconds"]
        < 1.0
    )
