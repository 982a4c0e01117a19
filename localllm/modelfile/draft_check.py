"""A Modelfile ``DRAFT``: which GGUF it names, and whether it can draft for the base model.

A draft model proposes tokens that the model verifies (speculative decoding,
llama-server's ``-md``), so it must be a whole GGUF model (not a LoRA adapter,
a vision projector or one part of a split GGUF: the runner loads one file) and
must speak the model's vocabulary: a drafted token id has to mean the same text
to both.  That is checked at create from the GGUF headers alone, so a model
never fails on its first request for it: the same ``tokenizer.ggml.model``, BOS
and EOS, and the same token list (as llama.cpp: up to 128 tokens more or fewer,
equal from id 5 on), compared string by string without holding either list.

The draft is stored as a layer of media type ``application/vnd.localllm.draft``
pointing at the GGUF's blob.  It carries no file name, so a DRAFT given as a
store model and the same file given as a path make the same manifest; a store
model's blob is shared, not copied, and the store's GC counts the layer as a
reference like any other (deleting that model keeps the blob).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localllm.errors import InvalidRequest, ModelNotFound
from localllm.gguf.info import read_model_info
from localllm.gguf.reader import Header, iter_string_array, read_header
from localllm.store.local import Store
from localllm.store.manifests import Layer, Media
from localllm.store.names import parse_digest, parse_name

TOKENS = "tokenizer.ggml.tokens"
TOKENIZER = "tokenizer.ggml.model"
SPECIAL_IDS = (
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.add_bos_token",
)
# As llama.cpp's speculative decoding: the lists may differ in length by up to 128
# (families pad the vocabulary to different sizes: Qwen2.5 0.5B has 151936 tokens,
# its 7B 152064) and are compared from id 5 on (some rename their first specials).
VOCAB_SLACK = 128
FIRST_CHECKED = 5


@dataclass(frozen=True)
class Draft:
    """A resolved DRAFT: its layer, the GGUF it points at, and how the user named it."""

    label: str  # the model name or file name, for messages
    layer: Layer
    path: Path


def resolve_draft(
    store: Store, given: str | dict[str, str], blob: Callable[[str, str], Path]
) -> Draft:
    """The draft a create request names: a store model's name, or ``{file name: digest}``
    of an uploaded GGUF (``blob(digest, what)`` finds it, or raises).  400 / 404 for
    anything that cannot be a draft model."""
    if isinstance(given, str):
        name = given.strip()
        try:
            entry = store.get(parse_name(name))
        except ModelNotFound:
            raise ModelNotFound(
                f'DRAFT model "{name}" not found: pull or create it first, '
                "or give the path of a GGUF file"
            ) from None
        layers = entry.manifest.by_type(Media.MODEL)
        if len(layers) != 1:
            raise InvalidRequest(
                f'DRAFT model "{name}" is split into {len(layers)} files; '
                "a draft model must be a single GGUF file"
            )
        label, digest = name, layers[0].digest
        path = store.blobs.path(digest)
    else:
        if len(given) != 1:
            raise InvalidRequest(
                "a model takes one draft model file (a split GGUF cannot "
                f"be a draft), got {len(given)}"
            )
        label, digest = next(iter(given.items()))
        path = blob(digest, f'DRAFT "{label}"')
    _check_model_file(label, path)
    return Draft(label, Layer(Media.DRAFT, parse_digest(digest), path.stat().st_size), path)


def _check_model_file(label: str, path: Path) -> None:
    info = read_model_info(path)  # not a GGUF: InvalidModelFile, a 400
    what = f'DRAFT model "{label}"'
    if info.is_adapter:
        raise InvalidRequest(f"{what} is a LoRA adapter, not a model (use it with ADAPTER)")
    if info.architecture == "clip":
        raise InvalidRequest(f"{what} is a vision projector, not a model (use it with PROJECTOR)")
    parts = info.kv.get("split.count")
    if isinstance(parts, int) and parts > 1:
        raise InvalidRequest(
            f"{what} is one part of a GGUF split into {parts} files; "
            "a draft model must be a single GGUF file"
        )


def check_vocabulary(draft: Draft, base: Path) -> None:
    """400 unless ``draft`` has the vocabulary of the model whose (first) GGUF is ``base``."""
    why = _difference(draft.path, read_header(draft.path), base, read_header(base))
    if why:
        raise InvalidRequest(
            f'DRAFT model "{draft.label}" does not share the model\'s vocabulary ({why})'
        )


def _difference(dpath: Path, dh: Header, bpath: Path, bh: Header) -> str:
    dm, bm = dh.kv.get(TOKENIZER), bh.kv.get(TOKENIZER)
    if dm != bm:
        return f"its tokenizer is {dm!r}, the model's is {bm!r}"
    if TOKENS not in dh.array_offsets or TOKENS not in bh.array_offsets:
        return "one of them has no token list"
    dn, bn = dh.array_lengths[TOKENS], bh.array_lengths[TOKENS]
    if abs(dn - bn) > VOCAB_SLACK:
        return f"it has {dn} tokens, the model has {bn}"
    for key in SPECIAL_IDS:
        if dh.kv.get(key) != bh.kv.get(key):
            return f"its {key} is {dh.kv.get(key)!r}, the model's is {bh.kv.get(key)!r}"
    # Not strict: the longer list's padding is compared with nothing.
    pairs = zip(
        iter_string_array(dpath, dh, TOKENS), iter_string_array(bpath, bh, TOKENS), strict=False
    )
    for i, (a, b) in enumerate(pairs):
        if i >= FIRST_CHECKED and a != b:
            return f"token {i} is {a!r}, the model's is {b!r}"
    return ""
