"""Token routes through the real daemon and the tiny models: exact wire shapes, real clients.

``tiny`` tokenizes one character per token (tests/support/tinymodel.py: ``tokenize``), so
every id is known; ``tiny-embed`` is an embedding model; ``no-vocab`` is a GGUF
with no tokenizer at all.  Counts are checked against what a generation of the
same body reports in its ``usage``, so the count and the bill agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from localllm import paths
from localllm.inference.tokens import MAX_TEXT_BYTES, MAX_TOKENS
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, own_daemon
from tests.support.models import import_gguf
from tests.support.tinymodel import BOS, EOS, N_VOCAB, make_tiny_model, tokenize

TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def no_vocab_model(dir: Path) -> Path:
    """A llama-architecture GGUF without any tokenizer metadata."""
    import gguf

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / "novocab.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(0)
    w.add_embedding_length(8)
    w.add_context_length(64)
    w.add_head_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    def stock(tmp: Path) -> None:
        store = Store(paths.models())
        import_gguf(
            store, parse_name("tiny"), [make_tiny_model(tmp / "gguf", chat_template=TEMPLATE)]
        )
        import_gguf(
            store, parse_name("tiny-embed"), [make_tiny_model(tmp / "embed", pooling="mean")]
        )
        import_gguf(store, parse_name("no-vocab"), [no_vocab_model(tmp / "novocab")])

    with own_daemon(tmp_path_factory, "tokens-daemon", stock, LOCALLLM_CONTEXT_LENGTH="512") as d:
        yield d


def post(d: Daemon, path: str, body: Any) -> httpx.Response:
    return httpx.post(d.url + path, json=body, timeout=120)


def test_api_tokenize_and_detokenize_round_trip(daemon: Daemon) -> None:
    r = post(daemon, "/api/tokenize", {"model": "tiny", "text": "hello, World é"})
    assert r.status_code == 200, r.text
    assert r.json() == {"model": "tiny", "tokens": tokenize("hello, World é", bos=False)}
    # Written-out control tokens are read as themselves, and written back out.
    ids = post(daemon, "/api/tokenize", {"model": "tiny", "text": "<s>ab</s>"}).json()["tokens"]
    assert ids == [BOS, *tokenize("ab", bos=False), EOS]
    back = post(daemon, "/api/detokenize", {"model": "tiny", "tokens": ids})
    assert back.status_code == 200 and back.json() == {"model": "tiny", "text": "<s>ab</s>"}
    assert post(daemon, "/api/tokenize", {"model": "tiny", "text": ""}).json()["tokens"] == []


def test_llama_server_shapes(daemon: Daemon) -> None:
    r = post(daemon, "/tokenize", {"model": "tiny", "content": "abc"})
    assert r.status_code == 200 and r.json() == {"tokens": tokenize("abc", bos=False)}
    with_bos = post(
        daemon,
        "/tokenize",
        {"model": "tiny", "content": "<s>a", "add_special": True, "parse_special": False},
    )
    # BOS added; "<s>" spelled as the characters it is made of.
    assert with_bos.json()["tokens"] == tokenize("<s>a")
    r = post(daemon, "/detokenize", {"model": "tiny", "tokens": tokenize("hi")})
    assert r.status_code == 200 and r.json() == {"content": "<s>hi"}
    chat = {
        "model": "tiny",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    }
    r = post(daemon, "/apply-template", chat)
    assert r.status_code == 200 and r.json() == {"prompt": "<system>be brief<user>hi<assistant>"}


def test_input_token_counts_equal_the_generations_usage(daemon: Daemon) -> None:
    import openai

    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key="x", max_retries=0)
    try:
        count = client.responses.input_tokens.count(
            model="tiny", input="count me", instructions="be brief"
        )
        assert count.object == "response.input_tokens"
        made = client.responses.create(
            model="tiny", input="count me", instructions="be brief", max_output_tokens=1
        )
        assert made.usage is not None and count.input_tokens == made.usage.input_tokens
        # BOS + "<system>be brief<user>count me<assistant>", a token a character.
        assert count.input_tokens == 1 + len("<system>be brief<user>count me<assistant>")
        messages: Any = [{"role": "user", "content": "two words"}]
        r = post(
            daemon, "/v1/chat/completions/input_tokens", {"model": "tiny", "messages": messages}
        )
        assert r.status_code == 200, r.text
        done = client.chat.completions.create(model="tiny", messages=messages, max_tokens=1)
        assert done.usage is not None
        assert r.json() == {
            "object": "response.input_tokens",
            "input_tokens": done.usage.prompt_tokens,
        }
        with pytest.raises(openai.NotFoundError, match="Response with id 'resp_1' not found"):
            client.responses.input_tokens.count(
                model="tiny", input="x", previous_response_id="resp_1"
            )
    finally:
        client.close()


def test_an_embedding_model_tokenizes_but_has_no_chat_to_count(daemon: Daemon) -> None:
    r = post(daemon, "/api/tokenize", {"model": "tiny-embed", "text": "abc"})
    assert r.status_code == 200 and r.json()["tokens"] == tokenize("abc", bos=False)
    # Loaded for embeddings, as /api/embed wants it.
    assert post(daemon, "/api/embed", {"model": "tiny-embed", "input": "abc"}).status_code == 200
    r = post(daemon, "/v1/responses/input_tokens", {"model": "tiny-embed", "input": "x"})
    assert r.status_code == 400
    assert 'model "tiny-embed" is an embedding model' in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "path,body,status,message",
    [
        ("/api/tokenize", None, 400, "missing request body"),
        ("/api/tokenize", {}, 400, "text is required"),
        ("/api/tokenize", {"text": "x"}, 400, "model is required"),
        ("/api/tokenize", {"model": "nope", "text": "x"}, 404, "not found"),
        (
            "/api/tokenize",
            {"model": "no-vocab", "text": "x"},
            400,
            'model "no-vocab" has no tokenizer',
        ),
        (
            "/api/tokenize",
            {"model": "tiny", "text": "a" * (MAX_TEXT_BYTES + 1)},
            400,
            f"text is {MAX_TEXT_BYTES + 1} bytes; the limit is {MAX_TEXT_BYTES} bytes",
        ),
        ("/api/tokenize", {"model": "tiny", "text": 5}, 400, 'invalid value for "text"'),
        ("/api/detokenize", {"model": "tiny"}, 400, "tokens is required"),
        (
            "/api/detokenize",
            {"model": "tiny", "tokens": [1, N_VOCAB]},
            400,
            f"token 1 is {N_VOCAB}, not an id of this model's vocabulary (0 to {N_VOCAB - 1})",
        ),
        ("/api/detokenize", {"model": "tiny", "tokens": [-1]}, 400, "token 0 is -1"),
        ("/api/detokenize", {"model": "tiny", "tokens": [True]}, 400, 'invalid value for "tokens'),
        (
            "/api/detokenize",
            {"model": "tiny", "tokens": [3] * (MAX_TOKENS + 1)},
            400,
            f"{MAX_TOKENS + 1} tokens; the limit is {MAX_TOKENS} a request",
        ),
        ("/api/detokenize", {"model": "no-vocab", "tokens": [0]}, 400, "has no tokenizer"),
        ("/tokenize", {"model": "tiny"}, 400, "content is required"),
        (
            "/tokenize",
            {"model": "tiny", "content": "a", "with_pieces": True},
            400,
            "with_pieces is not supported",
        ),
        (
            "/apply-template",
            {"model": "tiny", "messages": []},
            400,
            "messages must be a non-empty array",
        ),
        (
            "/apply-template",
            {"model": "no-vocab", "messages": [{"role": "user", "content": "x"}]},
            400,
            "has no tokenizer",
        ),
    ],
)
def test_bad_input_is_a_400_and_the_daemon_serves_on(
    daemon: Daemon, path: str, body: Any, status: int, message: str
) -> None:
    r = httpx.post(
        daemon.url + path, content=b"" if body is None else json.dumps(body), timeout=120
    )
    assert r.status_code == status, r.text
    assert message in r.json()["error"], r.text
    ok = post(daemon, "/api/tokenize", {"model": "tiny", "text": "ok"})
    assert ok.status_code == 200 and ok.json()["tokens"] == tokenize("ok", bos=False)


@pytest.mark.parametrize(
    "path,body,message",
    [
        ("/v1/responses/input_tokens", {"model": "tiny"}, "input must be a string or an array"),
        (
            "/v1/responses/input_tokens",
            {"model": "tiny", "input": []},
            "input must contain at least one message",
        ),
        ("/v1/responses/input_tokens", [1], "request body must be a JSON object"),
        ("/v1/responses/input_tokens", {"model": "no-vocab", "input": "x"}, "has no tokenizer"),
        (
            "/v1/chat/completions/input_tokens",
            {"model": "tiny", "messages": []},
            "messages must be a non-empty array",
        ),
        (
            "/v1/chat/completions/input_tokens",
            {"messages": [{"role": "user", "content": "x"}]},
            "model is required",
        ),
    ],
)
def test_bad_counts_are_openai_400s(daemon: Daemon, path: str, body: Any, message: str) -> None:
    r = post(daemon, path, body)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]["message"], r.text


def test_a_lone_surrogate_is_refused(daemon: Daemon) -> None:
    r = httpx.post(
        daemon.url + "/api/tokenize", timeout=30, content=b'{"model": "tiny", "text": "a\\ud800b"}'
    )
    assert r.status_code == 400 and "lone surrogate" in r.json()["error"]
