"""Does a LoRA adapter GGUF fit a base model?  Checked at create, before anything is stored.

The rules are the ones llama.cpp applies when it loads an adapter (so a model
that passes here does not fail later at its first request): every tensor is
``<base tensor>.lora_a`` / ``.lora_b`` in pairs (``*_norm.weight`` are ignored),
the base tensor exists, and the shapes chain: in ggml's order (``ne``), for a
base ``W [n_in, n_out]``, ``lora_a`` is ``[n_in, r]`` and ``lora_b`` is
``[r, n_out]`` (the token embedding is stored the other way round).  The
architecture is compared by the caller (it has the metadata already).

Both files have passed ``gguf.info``'s bounded header check before this reads
them with the ``gguf`` package, which maps the file instead of reading it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from localllm.errors import InvalidRequest

_A, _B = ".lora_a", ".lora_b"


def _shapes(paths: Sequence[Path]) -> dict[str, tuple[int, ...]]:
    import gguf

    out: dict[str, tuple[int, ...]] = {}
    for path in paths:
        for t in gguf.GGUFReader(str(path)).tensors:
            out[t.name] = tuple(int(d) for d in t.shape)
    return out


def _dims(shape: tuple[int, ...]) -> tuple[int, int]:
    # ggml pads missing dimensions with 1.
    return (shape[0] if shape else 1, shape[1] if len(shape) > 1 else 1)


def check_adapter_fits(fname: str, adapter: Path, base: Sequence[Path]) -> None:
    """Raise ``InvalidRequest`` naming the first tensor that does not fit ``base``."""
    lora = _shapes([adapter])
    model = _shapes(base)
    pairs: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, shape in lora.items():
        if name.endswith((_A, _B)):
            pairs.setdefault(name[: -len(_A)], {})[name[-len(_A) :]] = shape
        elif not name.endswith("_norm.weight"):
            raise InvalidRequest(
                f'ADAPTER "{fname}": tensor "{name}" is not a LoRA tensor '
                "(expected names ending in .lora_a / .lora_b)"
            )
    if not pairs:
        raise InvalidRequest(f'ADAPTER "{fname}" holds no LoRA tensors')
    for target, ab in sorted(pairs.items()):
        if len(ab) != 2:
            raise InvalidRequest(
                f'ADAPTER "{fname}": "{target}" lacks its {_B if _A in ab else _A} tensor'
            )
        if target not in model:
            raise InvalidRequest(
                f'ADAPTER "{fname}" changes "{target}", which the base model '
                "does not have: it was made for another model"
            )
        (w0, w1), (a0, a1), (b0, b1) = _dims(model[target]), _dims(ab[_A]), _dims(ab[_B])
        if target.endswith("token_embd.weight"):
            fits = w0 == b1 and w1 == a1
        else:
            fits = w0 == a0 and w1 == b1 and a1 == b0
        if not fits:
            raise InvalidRequest(
                f'ADAPTER "{fname}" does not fit the base model: "{target}" is '
                f"{w0}x{w1} there, but the adapter's lora_a is {a0}x{a1} and lora_b "
                f"{b0}x{b1}: it was made for another model"
            )
