"""A tiny llama-architecture GGUF, generated at test time, whose greedy output is known.

Owned by the engine; used by engine, runner and server tests for exact-text checks.

How it works: the vocabulary is SentencePiece-style (``tokenizer.ggml.model =
"llama"``) with ``<unk>``, ``<s>`` (BOS), ``</s>`` (EOS), the 256 byte-fallback
tokens ``<0x00>``..``<0xFF>`` and single-character tokens (``▁`` for space,
a-z, A-Z, 0-9, ``.,!?'-:;``).  No multi-character tokens exist, so text
tokenizes one character per token; characters outside the vocabulary (``é``,
``€``) fall back to their UTF-8 bytes.  No space prefix is added.

Token embeddings are one-hot and every block's ``attn_output`` and ``ffn_down``
are zero, so the residual stream is the current token's one-hot vector and the
output matrix alone decides the next token: a fixed successor of the last
token, with logit ``SHARPNESS`` (10) against 0 for every other token.

Successors (greedy, ``temperature=0``)::

    <s> -> a,  a -> b -> ... -> y -> z -> </s>
    ▁ (space) -> a,   . -> ▁
    0 -> <0xC3> -> <0xA9> -> 1 -> 2 -> ... -> 9 -> <0xE2> -> <0x82> -> <0xAC> -> </s>
         (so "é" and "€" arrive split over 2 and 3 tokens)
    A..Z -> itself (loops forever: fills num_predict or the context)
    anything else -> </s>

So, with BOS added, ``GREEDY[prompt]`` is the exact generated text, and
``expected_greedy(prompt, num_predict)`` computes it for any prompt.  Generation
stops on EOS (``</s>``, an end-of-generation token).

Variants (keyword arguments of ``make_tiny_model``):

* ``attention=True``: random, non-zero attention weights (seeded).  Greedy text
  is unchanged (the successor's margin is large), but logprobs now depend on
  the whole context, so a test comparing logprobs catches KV-cache mix-ups
  between sequences.
* ``pooling="mean"``: writes ``llama.pooling_type`` for embedding use.  With
  ``attention=False`` the pooled embedding of a text is the normalised sum of
  one-hot vectors of its tokens (BOS included), so the cosine of two texts of
  distinct characters is ``shared / sqrt(len1 * len2)`` counted in tokens.
* ``n_ctx_train``: the context length written into the GGUF (default 2048).
* ``sliding_window=n``: the same model as Gemma 3 (``gemma3``: every layer attends
  over the last ``n`` positions only, q/k norms, and post-norms whose small weight
  keeps attention a nudge, as ``attention=True`` does): same greedy text, and its
  KV cache keeps only the window's cells, as Gemma 3's does.
* ``chat_template``: a Jinja chat template string (default ``CHAT_TEMPLATE``).
* ``splits=N``: write a split GGUF (``tiny-0000k-of-0000N.gguf``, at most
  ``ceil(tensors / N)`` tensors each) and return the first part's path;
  ``split_paths(first)`` lists all parts in order.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

BOS, EOS, UNK = 1, 2, 0
LETTERS = "abcdefghijklmnopqrstuvwxyz"
BYTE0 = 3  # token id of <0x00>
CHARS = "▁" + LETTERS + LETTERS.upper() + "0123456789" + ".,!?'-:;"
N_VOCAB = BYTE0 + 256 + len(CHARS)
N_EMBD = 384  # >= N_VOCAB so embeddings can be one-hot
N_HEAD = 6
N_FF = 64
N_LAYER = 1
SHARPNESS = 10.0

GREEDY: dict[str, str] = {
    "": LETTERS,  # just BOS
    "a": LETTERS[1:],
    "x": "yz",
    "hello": LETTERS[LETTERS.index("o") + 1 :],
    "0": "é123456789€",
    "5": "6789€",
    ".": " " + LETTERS,
    "!": "",  # immediately EOS
}
"""Prompt (BOS added) -> exact greedy completion (ends with EOS)."""

LOOP_PROMPT = "A"
"""A prompt whose continuation never ends: "AAAA..." until num_predict or the context is full."""

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}.{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def token_id(piece: str) -> int:
    """Id of a single-character token ("a", " " for ▁) or a byte token ("<0xC3>")."""
    if piece.startswith("<0x") and piece.endswith(">"):
        return BYTE0 + int(piece[3:-1], 16)
    return BYTE0 + 256 + CHARS.index("▁" if piece == " " else piece)


def successors() -> dict[int, int]:
    """The token -> next-token map the output matrix encodes."""
    nxt = {t: EOS for t in range(N_VOCAB)}
    nxt[BOS] = token_id("a")
    for a, b in itertools.pairwise(LETTERS):
        nxt[token_id(a)] = token_id(b)
    nxt[token_id(" ")] = token_id("a")
    nxt[token_id(".")] = token_id(" ")
    digits_chain = ["0", "<0xC3>", "<0xA9>", *"123456789", "<0xE2>", "<0x82>", "<0xAC>"]
    for a, b in itertools.pairwise(digits_chain):
        nxt[token_id(a)] = token_id(b)
    for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        nxt[token_id(c)] = token_id(c)
    return nxt


def tokenize(text: str, bos: bool = True) -> list[int]:
    """What llama.cpp's tokenizer makes of ``text`` with this vocabulary."""
    out = [BOS] if bos else []
    for ch in text:
        if ch == " " or ch in CHARS:
            out.append(token_id(ch))
        else:
            out.extend(BYTE0 + b for b in ch.encode("utf-8"))
    return out


def expected_greedy(prompt: str, num_predict: int = -1) -> str:
    """The exact greedy completion of ``prompt`` (BOS added), optionally cut at
    ``num_predict`` tokens; an unfinished UTF-8 character at the cut is dropped."""
    nxt, tok = successors(), tokenize(prompt)[-1]
    data, n = b"", 0
    while n != num_predict:
        tok = nxt[tok]
        if tok == EOS:
            break
        n += 1
        data += _piece(tok)
    return data.decode("utf-8", "ignore")


def _piece(tok: int) -> bytes:
    if BYTE0 <= tok < BYTE0 + 256:
        return bytes([tok - BYTE0])
    ch = CHARS[tok - BYTE0 - 256]
    return b" " if ch == "▁" else ch.encode()


def _vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + list(CHARS)
    # SentencePiece token types: 1 normal, 2 unknown, 3 control, 6 byte.
    types = [2, 3, 3] + [6] * 256 + [1] * len(CHARS)
    scores = [0.0] * len(tokens)
    return tokens, scores, types


def write_vocab(w: Any, padding: int = 0) -> None:
    """The SentencePiece-style vocabulary (and ``padding`` unused ``<padN>`` tokens after
    it) into a ``gguf.GGUFWriter``: tokens, scores, types, BOS/EOS/UNK, no added space."""
    tokens, scores, types = _vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens + [f"<pad{i}>" for i in range(padding)])
    w.add_token_scores(scores + [0.0] * padding)
    w.add_token_types(types + [1] * padding)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_unk_token_id(UNK)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)


def make_tiny_model(
    dir: Path,
    *,
    attention: bool = False,
    pooling: str | None = None,
    n_ctx_train: int = 2048,
    chat_template: str | None = CHAT_TEMPLATE,
    name: str = "tiny.gguf",
    seed: int = 0,
    splits: int = 1,
    n_layer: int = N_LAYER,
    overrides: dict[str, str] | None = None,
    sharpness: float = SHARPNESS,
    n_ff: int = N_FF,
    padding: int = 0,
    sliding_window: int = 0,
) -> Path:
    """Write the tiny model into ``dir`` and return its path (see the module docstring).

    ``n_layer`` > 1 stacks more identical-role blocks (placement tests split them
    over devices); the greedy text is the same for any count.  ``overrides``
    changes successors (``{"e": "x"}``: after "e" comes "x"), and ``sharpness``
    the winning logit: together they make draft models that agree with the
    alphabet model only in part, or only unsurely.  ``n_ff`` widens the (zero,
    so inert) feed-forward blocks: a model that costs more per token, same text.
    ``padding`` appends that many unused tokens ``<pad0>``.. (at most 51), as
    families pad their vocabularies; ``overrides`` may name them as successors.
    """
    import gguf  # heavy import kept out of module import

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    n_tensors = 3 + (13 if sliding_window else 9) * n_layer
    per_split = -(-n_tensors // splits) if splits > 1 else 0
    arch = "gemma3" if sliding_window else "llama"
    w = gguf.GGUFWriter(str(path), arch, split_max_tensors=per_split)
    if sliding_window:
        w.add_sliding_window(sliding_window)
    w.add_name("tiny")
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)  # all f32
    if pooling is not None:
        w.add_pooling_type(gguf.PoolingType[pooling.upper()])
    n_vocab = N_VOCAB + padding
    if n_vocab > N_EMBD:
        raise ValueError(f"at most {N_EMBD - N_VOCAB} padding tokens")
    write_vocab(w, padding)
    if chat_template:
        w.add_chat_template(chat_template)

    f32 = np.float32
    emb = np.zeros((n_vocab, N_EMBD), dtype=f32)
    emb[np.arange(n_vocab), np.arange(n_vocab)] = 1.0
    out = np.zeros((n_vocab, N_EMBD), dtype=f32)
    # After the final RMS norm a one-hot row has value sqrt(N_EMBD) in its slot.
    table = successors()
    for a, b in (overrides or {}).items():
        table[token_id(a)] = N_VOCAB + int(b[4:-1]) if b.startswith("<pad") else token_id(b)
    for t, nxt in table.items():
        out[nxt, t] = sharpness / np.sqrt(N_EMBD)
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=f32))
    w.add_tensor("output.weight", out)
    rng = np.random.default_rng(seed)
    for i in range(n_layer):

        def attn(std: float) -> np.ndarray:
            # Small enough that the successor keeps its margin, large enough that
            # every logprob moves with the context.
            if not attention:
                return np.zeros((N_EMBD, N_EMBD), dtype=f32)
            return rng.normal(0.0, std, (N_EMBD, N_EMBD)).astype(f32)

        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=f32))
        w.add_tensor(p + "attn_q.weight", attn(0.05))
        w.add_tensor(p + "attn_k.weight", attn(0.05))
        w.add_tensor(p + "attn_v.weight", attn(0.02))
        w.add_tensor(p + "attn_output.weight", attn(0.002))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=f32))
        w.add_tensor(p + "ffn_gate.weight", np.zeros((n_ff, N_EMBD), dtype=f32))
        w.add_tensor(p + "ffn_up.weight", np.zeros((n_ff, N_EMBD), dtype=f32))
        w.add_tensor(p + "ffn_down.weight", np.zeros((N_EMBD, n_ff), dtype=f32))
        if sliding_window:
            head = N_EMBD // N_HEAD
            w.add_tensor(p + "attn_q_norm.weight", np.ones(head, dtype=f32))
            w.add_tensor(p + "attn_k_norm.weight", np.ones(head, dtype=f32))
            # Gemma normalises each block's output: a small weight keeps it a nudge.
            w.add_tensor(p + "post_attention_norm.weight", np.full(N_EMBD, 0.01, dtype=f32))
            w.add_tensor(p + "post_ffw_norm.weight", np.ones(N_EMBD, dtype=f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if splits > 1:
        return split_paths(path.with_name(f"{path.stem}-00001-of-{splits:05d}.gguf"))[0]
    return path


def split_paths(first: Path) -> list[Path]:
    """All parts of a split GGUF, in order, given its first part."""
    stem, _, total = first.stem.rpartition("-of-")
    base = stem.rsplit("-", 1)[0]
    n = int(total)
    return [first.with_name(f"{base}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]
