"""Model names and digests: defaults, HF names, and hostile input that must never become a path."""

from __future__ import annotations

import pytest

from localllm.errors import InvalidDigest, InvalidName
from localllm.store.names import digest_filename, parse_digest, parse_name


@pytest.mark.parametrize(
    ("raw", "parts", "display"),
    [
        ("llama3", ("registry.ollama.ai", "library", "llama3", "latest"), "llama3:latest"),
        ("llama3:8b", ("registry.ollama.ai", "library", "llama3", "8b"), "llama3:8b"),
        ("me/m:t", ("registry.ollama.ai", "me", "m", "t"), "me/m:t"),
        (
            "hf.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m",
            ("hf.co", "Qwen", "Qwen2.5-0.5B-Instruct-GGUF", "q4_k_m"),
            "hf.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m",
        ),
        ("https://huggingface.co/u.s/r", ("hf.co", "u.s", "r", "latest"), "hf.co/u.s/r:latest"),
        (
            "HF.CO/u/r:Model-Q4_K_M.gguf",
            ("hf.co", "u", "r", "Model-Q4_K_M.gguf"),
            "hf.co/u/r:Model-Q4_K_M.gguf",
        ),
        (
            "localhost:5000/ns/m",
            ("localhost:5000", "ns", "m", "latest"),
            "localhost:5000/ns/m:latest",
        ),
        ("m:", ("registry.ollama.ai", "library", "m", "latest"), "m:latest"),
    ],
)
def test_parse(raw: str, parts: tuple[str, ...], display: str) -> None:
    name = parse_name(raw)
    assert name.parts == parts
    assert name.display == display
    assert parse_name(name.display) == name


def test_hf_flag_and_case_insensitive_key() -> None:
    assert parse_name("hf.co/u/r").is_hf and not parse_name("u/r").is_hf
    assert parse_name("Llama3:Latest").key() == parse_name("llama3:latest").key()


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "../x",
        "a/../../etc",
        "..",
        "../../etc/passwd:x",
        "/abs/path",
        "a//b",
        "a/b/c/d",
        "x\x00y",
        "m:t\x00",
        "m:..",
        "m:.hidden",
        "a\\b",
        "m@sha256:" + "0" * 64,
        "x" * 700,
        "m:" + "t" * 200,
        "ns_" + "n" * 90 + "/m",
        ".m",
        "-m",
        "m:/t",
        "hf.co/../r",
        "hf.co/u/..",
        "hf.co/u",
        "h o s t/n/m",
        "m;rm -rf",
        "m\n:t",
        "m:t\nx",
        "ns\n/m",
        None,
        5,
    ],
)
def test_hostile_names_rejected(raw: object) -> None:
    with pytest.raises(InvalidName):
        parse_name(raw)


def test_every_accepted_part_is_a_plain_path_component() -> None:
    for raw in ["ab/c.d:e.f", "hf.co/a.b/c..d:e..f", "x_y/z-w:1.0"]:
        for part in parse_name(raw).parts:
            assert part not in (".", "..") and "/" not in part and "\\" not in part


def test_digests() -> None:
    hexd = "ab" * 32
    assert parse_digest(f"sha256:{hexd}") == parse_digest(f"sha256-{hexd}") == f"sha256:{hexd}"
    assert digest_filename(f"sha256:{hexd}") == f"sha256-{hexd}"
    for bad in [
        "sha256:" + "AB" * 32,
        "sha256:abc",
        "md5:" + hexd,
        "sha256:" + hexd + "/..",
        "../sha256-" + hexd,
        "sha256:" + hexd + "\x00",
        None,
        "",
    ]:
        with pytest.raises(InvalidDigest):
            parse_digest(bad)
