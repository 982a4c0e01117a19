"""Modelfile parser and serializer: syntax, typed parameters, errors with positions, round trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.modelfile.parser import ModelfileError, parse
from localllm.modelfile.serialize import quote, to_text
from tests.support.modelfiles import CORPUS_FILES


def test_every_instruction() -> None:
    mf = parse('''# a comment
FROM llama3:8b
PARAMETER temperature 0.7
PARAMETER num_ctx 4096
PARAMETER stop "<|eot_id|>"
PARAMETER stop <|start_header_id|>
PARAMETER use_mmap false
TEMPLATE """{{ .Prompt }}"""
SYSTEM You are Mario.
ADAPTER ./lora.gguf
LICENSE """MIT
text"""
LICENSE second
MESSAGE user Is Toronto in Canada?
MESSAGE assistant yes
REQUIRES 0.5.0
''')
    assert mf.from_ == "llama3:8b" and mf.from_line == 2
    assert mf.parameters == {
        "temperature": 0.7,
        "num_ctx": 4096,
        "use_mmap": False,
        "stop": ["<|eot_id|>", "<|start_header_id|>"],
    }
    assert isinstance(mf.parameters["num_ctx"], int)
    assert mf.template == "{{ .Prompt }}"
    assert mf.system == "You are Mario."
    assert mf.adapters == ["./lora.gguf"]
    assert mf.licenses == ["MIT\ntext", "second"]
    assert mf.messages == [
        {"role": "user", "content": "Is Toronto in Canada?"},
        {"role": "assistant", "content": "yes"},
    ]
    assert mf.requires == "0.5.0"


def test_case_spacing_crlf_and_quotes() -> None:
    mf = parse(
        'from  base\r\n\r\n   PaRaMeTeR\tTOP_K   7  \r\nsystem "  keep my spaces  "\r\n'
        'template """\r\nline1\r\n  line2\r\n"""\r\n'
    )
    assert mf.from_ == "base"
    assert mf.parameters == {"top_k": 7}
    assert mf.system == "  keep my spaces  "
    assert mf.template == "\nline1\n  line2\n"


def test_quotes_inside_values() -> None:
    mf = parse(
        'FROM x\nSYSTEM say "hi" to them\nMESSAGE user "quoted "inner" text"\n'
        'TEMPLATE """ends with a quote: "x""""\n'
    )
    assert mf.system == 'say "hi" to them'
    assert mf.messages[0]["content"] == 'quoted "inner" text'
    assert mf.template == 'ends with a quote: "x"'


@pytest.mark.parametrize(
    ("text", "line", "col", "words"),
    [
        ("FROM x\nFOO bar\n", 2, 1, 'unknown instruction "FOO"'),
        ("FROM x\nPARAMETER nope 1\n", 2, 11, 'unknown parameter "nope"'),
        ("FROM x\nPARAMETER tfs_z 1\n", 2, 11, 'unknown parameter "tfs_z"'),
        ("FROM x\nPARAMETER num_ctx lots\n", 2, 19, "must be of type integer"),
        ("FROM x\nPARAMETER temperature -1\n", 2, 23, "temperature"),
        ("FROM x\nPARAMETER use_mmap maybe\n", 2, 20, "boolean"),
        ("FROM x\nPARAMETER top_k\n", 2, 16, "missing value"),
        ("FROM x\nMESSAGE robot hi\n", 2, 9, "message role must be one of"),
        ('FROM x\nSYSTEM """never closed\nmore\n', 2, 8, 'unterminated """'),
        ('FROM x\nSYSTEM "open\n', 2, 8, "unterminated quote"),
        ('FROM x\nTEMPLATE """a""" trailing\n', 2, 18, "unexpected text"),
        ("FROM a\nFROM b\n", 2, 1, "only one FROM"),
        ("# nothing\nPARAMETER top_k 1\n", 0, 0, "no FROM line"),
        ("FROM\n", 1, 5, "missing value for FROM"),
    ],
)
def test_errors_name_line_and_column(text: str, line: int, col: int, words: str) -> None:
    with pytest.raises(ModelfileError) as info:
        parse(text)
    err = info.value
    assert words in err.message
    assert (err.line, err.column) == (line, col)
    assert err.status == 400
    if line:
        assert err.message.startswith(f"line {line}, column {col}: ")


def test_renderer_and_parser_lines_are_accepted() -> None:
    assert parse("FROM x\nRENDERER qwen3\nPARSER qwen3\n").from_ == "x"


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_corpus_parses_and_round_trips(path: Path) -> None:
    first = parse(path.read_text())
    text = to_text(first, header=["generated"])
    second = parse(text)
    assert second == first
    assert to_text(second, header=["generated"]) == text


def test_corpus_is_varied() -> None:
    texts = [p.read_bytes() for p in CORPUS_FILES]
    assert len(texts) >= 8
    assert any(b"\r\n" in t for t in texts)
    assert any(t.count(b"PARAMETER stop") >= 10 for t in texts)
    assert any(b"from " in t for t in texts)  # lower-case instructions
    assert any(b"MESSAGE" in t for t in texts) and any(b"ADAPTER" in t for t in texts)


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        " padded ",
        "",
        '"starts quoted',
        "# hash",
        "multi\nline",
        'ends with "quote"',
        "tab\there",
    ],
)
def test_quote_round_trips(value: str) -> None:
    mf = parse(f"FROM x\nSYSTEM {quote(value)}\nMESSAGE user {quote(value)}\n")
    assert mf.system == value or (value.strip() == "" and mf.system == value)
    assert mf.messages[0]["content"] == value


def test_values_with_triple_quotes_are_refused_by_the_writer() -> None:
    with pytest.raises(ModelfileError):
        quote('has """ inside\nand a newline')


def test_typed_parameters_round_trip_exactly() -> None:
    mf = parse("FROM x\nPARAMETER temperature 0.1\nPARAMETER seed -1\nPARAMETER top_p 1\n")
    again = parse(to_text(mf))
    assert again.parameters == {"temperature": 0.1, "seed": -1, "top_p": 1.0}
    assert isinstance(again.parameters["top_p"], float)


def test_modelfile_example_parses_and_names_every_instruction() -> None:
    path = Path(__file__).resolve().parents[2] / "Modelfile.example"
    text = path.read_text()
    mf = parse(text)
    assert mf.from_.startswith("hf.co/") and mf.template and mf.system and mf.licenses
    assert mf.messages and mf.requires and len(mf.parameters["stop"]) == 3
    for word in (
        "FROM",
        "PARAMETER",
        "TEMPLATE",
        "SYSTEM",
        "ADAPTER",
        "LICENSE",
        "MESSAGE",
        "REQUIRES",
    ):
        assert f"\n{word} " in text or f"# {word} " in text


def test_num_parallel_parameter_parses_and_round_trips() -> None:
    # Ours, not Ollama's: the model's slots (docs/modelfile.md).
    mf = parse("FROM x\nPARAMETER num_parallel 2\n")
    assert mf.parameters == {"num_parallel": 2}
    assert "PARAMETER num_parallel 2" in to_text(mf)
    assert parse(to_text(mf)).parameters == {"num_parallel": 2}
    for bad in ("0", "257", "two"):
        with pytest.raises(ModelfileError, match="num_parallel"):
            parse(f"FROM x\nPARAMETER num_parallel {bad}\n")
