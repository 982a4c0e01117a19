"""Special tokens reach the template with every role they play, and BOS is kept or
stripped the way llama.cpp's tokenizer decides (``tokenizer.ggml.add_bos_token``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.gguf.info import read_model_info, tokenizer_adds_bos
from localllm.template.chat import render_chat, strip_leading_bos
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.template_corpus import corpus

NEMO = "mistralai-Mistral-Nemo-Instruct-2407.jinja"


def test_one_id_for_bos_and_eos_keeps_both_roles(tmp_path: Path) -> None:
    info = read_model_info(write_gguf(tmp_path / "m.gguf", Shape(bos_id=2, eos_id=2, eot_id=2)))
    assert info.bos_token == info.eos_token == info.eot_token == "</s>"


def test_mistral_nemo_multi_turn_keeps_its_eos(tmp_path: Path) -> None:
    # Nemo closes each assistant turn with eos_token; with BOS sharing its id the
    # role used to be lost and the prompt was one token short.
    shape = Shape(bos_id=1, eos_id=1, tokens=("<unk>", "<s>", *(f"t{i}" for i in range(2, 64))))
    info = read_model_info(write_gguf(tmp_path / "m.gguf", shape))
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "again"},
    ]
    out = render_chat(
        corpus()[NEMO], messages, bos_token=info.bos_token or "", eos_token=info.eos_token or ""
    )
    assert "yo<s>[INST]" in out and out.startswith("<s>[INST]")


@pytest.mark.parametrize(
    ("kv", "adds"),
    [
        ({"tokenizer.ggml.model": "llama"}, True),  # SentencePiece
        ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.add_bos_token": False}, False),
        ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2"}, False),
        ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe"}, True),
        (
            {
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.pre": "qwen2",
                "tokenizer.ggml.add_bos_token": True,
            },
            True,
        ),
        ({"tokenizer.ggml.model": "gemma4", "tokenizer.ggml.add_bos_token": False}, True),
        ({"tokenizer.ggml.model": "t5"}, False),
        ({"tokenizer.ggml.model": "bert"}, True),
        ({}, False),
    ],
)
def test_tokenizer_adds_bos_like_llama_cpp(kv: dict[str, object], adds: bool) -> None:
    assert tokenizer_adds_bos(kv) is adds


def test_add_bos_token_false_keeps_the_templates_bos(tmp_path: Path) -> None:
    off = read_model_info(
        write_gguf(
            tmp_path / "off.gguf", Shape(extra_kv=(("tokenizer.ggml.add_bos_token", False),))
        )
    )
    on = read_model_info(
        write_gguf(tmp_path / "on.gguf", Shape(extra_kv=(("tokenizer.ggml.add_bos_token", True),)))
    )
    assert (off.add_bos_token, on.add_bos_token) == (False, True)
    prompt = "<s>[INST]hi[/INST]"
    # The tokenizer adds none: the template's BOS is the only one (MiniMax, Seed-OSS).
    assert strip_leading_bos(prompt, "<s>", off.add_bos_token) == prompt
    # The tokenizer adds one: drop the template's so there is exactly one.
    assert strip_leading_bos(prompt, "<s>", on.add_bos_token) == "[INST]hi[/INST]"
