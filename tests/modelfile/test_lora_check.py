"""``check_adapter_fits``: the tensor rules llama.cpp applies when loading a LoRA."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from localllm.errors import InvalidRequest
from localllm.modelfile.lora_check import check_adapter_fits
from tests.support.tinylora import make_remap_lora, make_tiny_lora
from tests.support.tinymodel import N_EMBD, N_VOCAB, make_tiny_model


def write_lora(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    for name, value in tensors.items():
        w.add_tensor(name, value.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return [make_tiny_model(tmp_path_factory.mktemp("base"))]


def test_adapters_made_for_the_model_fit(base: list[Path], tmp_path: Path) -> None:
    check_adapter_fits("remap", make_remap_lora(tmp_path, {"a": "c"}), base)
    check_adapter_fits("attn", make_tiny_lora(tmp_path), base)
    z = np.zeros
    # Norm vectors are skipped (as llama.cpp does); the token embedding is stored flipped.
    check_adapter_fits(
        "embd",
        write_lora(
            tmp_path / "e.gguf",
            {
                "token_embd.weight.lora_a": z((N_VOCAB, 2)),
                "token_embd.weight.lora_b": z((N_EMBD, 2)),
                "blk.0.attn_norm.weight": z(N_EMBD),
            },
        ),
        base,
    )


@pytest.mark.parametrize(
    ("tensors", "words"),
    [
        ({"output.weight.lora_a": (2, N_EMBD)}, "lacks its .lora_b tensor"),
        (
            {"blk.7.attn_q.weight.lora_a": (2, N_EMBD), "blk.7.attn_q.weight.lora_b": (N_EMBD, 2)},
            '"blk.7.attn_q.weight", which the base model does not have',
        ),
        (
            {"output.weight.lora_a": (2, N_EMBD), "output.weight.lora_b": (N_VOCAB + 1, 2)},
            f'"output.weight" is {N_EMBD}x{N_VOCAB} there',
        ),
        (
            {"output.weight.lora_a": (2, N_EMBD), "output.weight.lora_b": (N_VOCAB, 3)},
            "lora_a is 384x2 and lora_b 3x",
        ),
        ({"output.weight": (N_VOCAB, N_EMBD)}, "is not a LoRA tensor"),
        ({}, "holds no LoRA tensors"),
    ],
)
def test_mismatches_are_named(
    base: list[Path], tmp_path: Path, tensors: dict[str, tuple[int, ...]], words: str
) -> None:
    path = write_lora(tmp_path / "bad.gguf", {k: np.zeros(v) for k, v in tensors.items()})
    with pytest.raises(InvalidRequest, match=r"ADAPTER \"bad\.gguf\"") as err:
        check_adapter_fits("bad.gguf", path, base)
    assert words in err.value.message
