"""GGUF header reader: real files from GGUFWriter, and hostile ones built byte by byte."""

from __future__ import annotations

import struct
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGUFWriter

from localllm.errors import InvalidModelFile
from localllm.gguf.info import read_model_info, read_model_info_split
from tests.support.ggufmeta import Shape, model_info_for, tensor_plan, write_gguf, write_split_gguf


def _bytes_of(ne: tuple[int, ...], ttype: object) -> int:
    block, size = GGML_QUANT_SIZES[ttype]  # type: ignore[index]
    return int(np.prod(ne)) // block * size


def test_reads_tiny_model(tmp_path: Path) -> None:
    shape = Shape(
        n_layers=3,
        n_embd=64,
        n_head=8,
        n_head_kv=2,
        n_vocab=40,
        eot_id=5,
        context_length=4096,
        chat_template="{{ x }}",
    )
    info = read_model_info(write_gguf(tmp_path / "m.gguf", shape))
    plan = tensor_plan(shape)
    assert info.architecture == "llama" and info.name == "tiny-test"
    assert (info.n_layers, info.n_embd, info.n_head, info.n_head_kv) == (3, 64, 8, 2)
    assert info.head_dim_k == info.head_dim_v == 8
    assert info.context_length == 4096 and info.n_vocab == 40
    assert info.file_type == "F32"
    assert info.parameter_count == sum(int(np.prod(ne)) for _, ne, _ in plan)
    for i in range(3):
        want = sum(_bytes_of(ne, t) for n, ne, t in plan if n.startswith(f"blk.{i}."))
        assert info.layer_bytes[i] == want
    out = sum(_bytes_of(ne, t) for n, ne, t in plan if n.startswith("output"))
    assert info.output_bytes == out
    assert info.token_embd_bytes == 64 * 40 * 4
    assert (info.bos_token, info.eos_token, info.eot_token) == ("<s>", "</s>", "t5")
    assert info.chat_template == "{{ x }}"
    assert info.kv["llama.block_count"] == 3
    # The vocabulary is counted, never kept.
    assert info.kv["tokenizer.ggml.tokens"] is None
    assert info.array_lengths["tokenizer.ggml.tokens"] == 40
    assert info.file_size == (tmp_path / "m.gguf").stat().st_size


def test_tied_output_counts_token_embd(tmp_path: Path) -> None:
    info = read_model_info(write_gguf(tmp_path / "m.gguf", Shape(tied_output=True)))
    assert info.output_bytes == info.token_embd_bytes + 64 * 4  # + output_norm


def test_quant_label_and_realistic_shapes() -> None:
    info = model_info_for("0.5b", "Q4_K_M")
    assert info.file_type == "Q4_K_M"
    assert info.parameter_size == "494.03M"  # Qwen2.5-0.5B's real count
    assert info.n_vocab == 151936 and info.n_layers == 24 and info.n_head_kv == 2
    big = model_info_for("70b", "Q4_K_M")
    assert big.parameter_size == "70.6B" and len(big.layer_bytes) == 80
    assert 35e9 < big.file_size < 50e9


def test_per_layer_head_counts_take_the_max(tmp_path: Path) -> None:
    w = GGUFWriter(tmp_path / "m.gguf", "llama")
    w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_head_count([4, 8])
    w.add_head_count_kv([1, 2])
    w.add_tensor("blk.0.attn_norm.weight", np.zeros(64, dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    info = read_model_info(tmp_path / "m.gguf")
    assert (info.n_head, info.n_head_kv) == (8, 2)
    assert info.file_type == "F16"  # no general.file_type: labelled from the weights


def test_expert_bytes_per_layer_follow_llama_cpp_n_cpu_moe_pattern(tmp_path: Path) -> None:
    w = GGUFWriter(tmp_path / "m.gguf", "qwen3moe")
    w.add_block_count(3)
    f32 = np.zeros((4, 32), dtype=np.float32)  # 512 bytes
    w.add_tensor("blk.0.ffn_up.weight", f32)  # layer 0 is dense
    for i in (1, 2):
        for name in (
            "ffn_up_exps",
            "ffn_down_exps",
            "ffn_gate_exps",
            "ffn_gate_up_exps",
            "ffn_up_chexps",
            "ffn_up_shexp",
            "ffn_gate_inp",
            "attn_q",
        ):
            w.add_tensor(f"blk.{i}.{name}.weight", f32)
    w.add_tensor("output.weight", f32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    info = read_model_info(tmp_path / "m.gguf")
    # The shared expert, the router and attention stay with the layer on the GPU.
    assert info.expert_bytes == [0, 5 * 512, 5 * 512]
    assert info.layer_bytes == [512, 8 * 512, 8 * 512]
    dense = read_model_info(write_gguf(tmp_path / "d.gguf", Shape(n_layers=2)))
    assert dense.expert_bytes == []


def test_split_sums_over_shards(tmp_path: Path) -> None:
    shape = Shape(n_layers=4)
    whole = read_model_info(write_gguf(tmp_path / "whole.gguf", shape))
    paths = write_split_gguf(tmp_path, "m", shape, n_splits=3)
    info = read_model_info_split(paths)
    assert info.parameter_count == whole.parameter_count
    assert info.layer_bytes == whole.layer_bytes
    assert info.output_bytes == whole.output_bytes
    assert info.file_size == sum(p.stat().st_size for p in paths)
    assert info.n_vocab == whole.n_vocab
    with pytest.raises(InvalidModelFile, match="declares 3 files"):
        read_model_info_split(paths[:2])


# -- hostile and broken files -------------------------------------------------


def _s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", 8) + _s(value)


def _raw(
    kvs: list[bytes],
    tensors: list[bytes],
    *,
    n_tensors: int | None = None,
    n_kv: int | None = None,
    version: int = 3,
    magic: bytes = b"GGUF",
    tail: bytes = b"\0" * 64,
) -> bytes:
    head = magic + struct.pack(
        "<IQQ",
        version,
        len(tensors) if n_tensors is None else n_tensors,
        len(kvs) if n_kv is None else n_kv,
    )
    return head + b"".join(kvs) + b"".join(tensors) + tail


def _tensor(name: str, dims: list[int], ttype: int = 0, offset: int = 0) -> bytes:
    return (
        _s(name)
        + struct.pack("<I", len(dims))
        + b"".join(struct.pack("<Q", d) for d in dims)
        + struct.pack("<IQ", ttype, offset)
    )


ARCH = _kv_str("general.architecture", "llama")


def _rejects(tmp_path: Path, data: bytes, match: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    tracemalloc.start()
    start = time.process_time()
    try:
        with pytest.raises(InvalidModelFile, match=match):
            read_model_info(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.process_time() - start < 1.0
    assert peak < 4 << 20, f"used {peak} bytes on a hostile file"


def test_valid_raw_file_is_accepted(tmp_path: Path) -> None:
    # The builder below makes files the reader accepts, so each rejection is for its defect.
    path = tmp_path / "ok.gguf"
    path.write_bytes(_raw([ARCH], [_tensor("blk.0.x", [4, 4])], tail=b"\0" * 128))
    assert read_model_info(path).layer_bytes == [64]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "magic"),
        (b"GGML" + b"\0" * 60, "magic"),
        (b"PK\x03\x04" + b"\0" * 60, "magic"),
        (_raw([ARCH], [], version=1), "version 1"),
        (_raw([ARCH], [], version=4), "version 4"),
        (_raw([ARCH], [], version=3 << 24), "big-endian"),
        (_raw([ARCH], [], n_tensors=1 << 62), "absurd tensor count"),
        (_raw([ARCH], [], n_tensors=1000), "absurd tensor count"),
        (_raw([ARCH], [], n_kv=1 << 40), "absurd key/value count"),
        (
            _raw([ARCH, _s("k") + struct.pack("<I", 8) + struct.pack("<Q", 1 << 60)], []),
            "over the limit",
        ),
        (_raw([ARCH, _s("k") + struct.pack("<I", 8) + struct.pack("<Q", 1000)], []), "truncated"),
        (_raw([struct.pack("<Q", 1 << 50)], []), "over the limit"),
        (_raw([ARCH, _s("a") + struct.pack("<IIQ", 9, 4, 1 << 40)], []), "over the limit"),
        (_raw([ARCH, _s("a") + struct.pack("<IIQ", 9, 8, 1 << 20)], []), "truncated"),
        (_raw([ARCH, _s("a") + struct.pack("<IIQ", 9, 9, 1)], []), "unsupported element type"),
        # A vocabulary is skipped in bulk: its faults still stop the walk, named.
        (
            _raw(
                [
                    ARCH,
                    _s("tokenizer.ggml.tokens")
                    + struct.pack("<IIQ", 9, 8, 3)
                    + _s("a")
                    + struct.pack("<Q", 1 << 40),
                ],
                [],
            ),
            "element of tokenizer.ggml.tokens is .* over",
        ),
        (
            _raw(
                [
                    ARCH,
                    _s("tokenizer.ggml.tokens")
                    + struct.pack("<IIQ", 9, 8, 2)
                    + _s("a")
                    + struct.pack("<Q", 100)
                    + b"xy",
                ],
                [],
            ),
            "truncated: element of tokenizer",
        ),
        (_raw([ARCH, _s("a") + struct.pack("<I", 77)], []), "unknown value type"),
        (_raw([ARCH, ARCH], []), "duplicate key"),
        (_raw([ARCH, _s("general.alignment") + struct.pack("<II", 4, 3)], []), "alignment"),
        (_raw([ARCH], [_tensor("t", [4, 4], offset=1 << 40)]), "past the end"),
        (_raw([ARCH], [_tensor("t", [4, 4], offset=32)]), "past the end"),
        (_raw([ARCH], [_tensor("t", [4, 4], offset=3)]), "not aligned"),
        (_raw([ARCH], [_tensor("t", [1 << 39, 1 << 39])]), "too many elements"),
        (_raw([ARCH], [_tensor("t", [0, 4])]), "invalid dimension"),
        (_raw([ARCH], [_tensor("t", [4] * 5)]), "dimensions"),
        (_raw([ARCH], [_tensor("t", [4], ttype=999)]), "unknown type"),
        (_raw([ARCH], [_tensor("t", [33], ttype=12)]), "not a multiple"),
        (
            _raw([ARCH], [_tensor("t", [4]), _tensor("t", [4], offset=32)], tail=b"\0" * 256),
            "duplicate tensor",
        ),
        (
            _raw([ARCH], [_tensor("a", [8]), _tensor("b", [8], offset=0)], tail=b"\0" * 256),
            "overlaps",
        ),
        (_raw([ARCH], [_tensor("x" * 300, [4])]), "over the limit"),
        (_raw([], [_tensor("t", [4])]), "architecture is missing"),
        (
            _raw([ARCH, _s("llama.block_count") + struct.pack("<IQ", 10, 1 << 40)], []),
            "block_count",
        ),
    ],
)
def test_hostile_headers_rejected(tmp_path: Path, data: bytes, match: str) -> None:
    _rejects(tmp_path, data, match)


def test_string_cap_and_template_exception(tmp_path: Path) -> None:
    big = "x" * ((1 << 20) + 1)
    _rejects(tmp_path, _raw([ARCH, _kv_str("general.description", big)], []), "over the limit")
    path = tmp_path / "ok.gguf"
    path.write_bytes(_raw([ARCH, _kv_str("tokenizer.chat_template", big)], []))
    assert read_model_info(path).chat_template == big


def test_truncated_at_every_offset(tmp_path: Path) -> None:
    good = write_gguf(tmp_path / "m.gguf", Shape(n_layers=1, n_vocab=8)).read_bytes()
    assert read_model_info(tmp_path / "m.gguf").n_layers == 1
    cut = tmp_path / "cut.gguf"
    start = time.process_time()
    for n in [*range(0, 1200, 7), *range(1200, len(good), 997), len(good) - 1]:
        cut.write_bytes(good[:n])
        with pytest.raises(InvalidModelFile):
            read_model_info(cut)
    assert time.process_time() - start < 10


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidModelFile, match="cannot open"):
        read_model_info(tmp_path / "nope.gguf")


def test_large_vocabulary_read_with_bounded_memory(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "v.gguf",
        Shape(
            n_vocab=200_000, n_embd=32, n_head=2, n_head_kv=2, n_ff=32, n_layers=1, eos_id=199_999
        ),
    )
    tracemalloc.start()
    try:
        info = read_model_info(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.n_vocab == 200_000 and info.eos_token == "t199999"
    assert peak < 8 << 20
