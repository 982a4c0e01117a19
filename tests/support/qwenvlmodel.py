"""A tiny Qwen2-VL pair for tests: an M-RoPE text model ("qwen2vl") and its projector.

Owned by the engine; used by tests/engine/test_vision_mrope.py (and any test that needs
images on an M-RoPE model).

``make_qwen_model(dir)`` writes the text model: tests/support/tinymodel.py's vocabulary,
one-hot embeddings and successor output (so text-only prompts give
``tinymodel.expected_greedy``), under architecture ``qwen2vl`` with
``qwen2vl.rope.dimension_sections`` = [8, 12, 12, 0], so llama.cpp builds it with
M-RoPE and 4 positions per embedding.  Two changes let an image steer the text:

* libmtmd wraps every Qwen image in ``<|vision_start|>`` .. ``<|vision_end|>``, so the
  prompt never ends on an image token and the current token alone cannot see it.
  Head 0 of the one attention layer therefore attends to image tokens only: its
  query is a constant bias, its key reads the image flag dimension ``FLAG``
  (score about 28 for an image token, 0 for text), and its value/output copy the
  image's colour dimensions (``RED_DIM``, ``GREEN_DIM``) into the residual.
* the output matrix gives the colour dimensions a logit for ``a`` (red) or ``n``
  (green) that beats the weak default "anything else -> </s>" successor (1 instead
  of 10) but not the alphabet's: after ``<|vision_end|>`` a red image continues
  ``RED_GREEDY`` and a green one ``GREEN_GREEDY``, and text after the image continues
  from its last character as usual.

``attention=True`` adds seeded random weights to heads 1-5 (head 0 keeps its job), so
logprobs depend on every position: a test comparing them with libmtmd's own
evaluation catches wrong positions.

``make_qwen_projector(dir)`` writes a ``qwen2vl_merger`` projector: a 1-block ViT of
width 16 on 4-pixel patches (two temporal conv kernels, the second zero), whose
patch features 0/1 are the patch's mean red/green; blocks are identity (zero
attention and FFN outputs); the merger concatenates 2x2 patches and its MLP
(``mm.0`` -> GELU -> ``mm.2``) writes the summed red onto ``RED_DIM``, the summed
green onto ``GREEN_DIM`` and 1 onto ``FLAG``.  A WxH image (multiples of 8 pixels,
at least 8 tokens) gives (W/8)x(H/8) tokens and max(W, H)/8 positions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tests.support.tinymodel import (
    CHAT_TEMPLATE,
    EOS,
    LETTERS,
    N_EMBD,
    N_FF,
    N_HEAD,
    N_VOCAB,
    SHARPNESS,
    successors,
    token_id,
    write_vocab,
)

PATCH = 4
MERGE = 2
RED_DIM, GREEN_DIM, FLAG = 380, 381, 382  # residual dimensions no token uses
SECTIONS = [8, 12, 12, 0]
WEAK = 1.0  # the default successor's strength (</s>), against SHARPNESS
RED_GREEDY = LETTERS
GREEN_GREEDY = LETTERS[LETTERS.index("n") :]
HEAD = N_EMBD // N_HEAD

if TYPE_CHECKING:
    import gguf


def noise_png(width: int, height: int, seed: int = 0) -> bytes:
    """A PNG of seeded random pixels: every image token differs, so its place matters."""
    import struct
    import zlib

    rng = np.random.default_rng(seed)
    rows = b"".join(
        b"\x00" + rng.integers(0, 256, width * 3, dtype=np.uint8).tobytes() for _ in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def tokens_for(width: int, height: int) -> tuple[int, int]:
    """(image tokens, positions) of a WxH image (sides already multiples of 8)."""
    nx, ny = width // (PATCH * MERGE), height // (PATCH * MERGE)
    return nx * ny, max(nx, ny)


def _strong() -> set[int]:
    """Tokens whose successor is deliberate (the chains, and their ends' </s>)."""
    nxt = successors()
    return {t for t, n in nxt.items() if n != EOS} | {token_id("z"), token_id("<0xAC>")}


def make_qwen_model(
    dir: Path,
    *,
    attention: bool = False,
    name: str = "qwen2vl.gguf",
    seed: int = 0,
    arch: str = "qwen2vl",
) -> Path:
    """Write the tiny text model into ``dir`` (see the module docstring).

    ``arch="qwen3vl"``: the same model as Qwen3-VL's text architecture, whose M-RoPE
    interleaves its sections (IMROPE) and whose queries and keys are RMS-normalised
    per head (the norms' last weight is 2 so head 0's image score stays about 32)."""
    import gguf  # heavy import kept out of module import

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-qwen2vl")
    w.add_context_length(2048)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(HEAD)
    w.add_rope_dimension_sections(SECTIONS)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)
    write_vocab(w)
    w.add_chat_template(CHAT_TEMPLATE)

    f32 = np.float32
    scale = 1 / np.sqrt(N_EMBD)  # a one-hot row is sqrt(N_EMBD) after the final RMS norm
    emb = np.zeros((N_VOCAB, N_EMBD), dtype=f32)
    emb[np.arange(N_VOCAB), np.arange(N_VOCAB)] = 1.0
    out = np.zeros((N_VOCAB, N_EMBD), dtype=f32)
    strong = _strong()
    for t, nxt in successors().items():
        out[nxt, t] = (SHARPNESS if t in strong else WEAK) * scale
    # With the colour at 1 next to the current token's 1, both read 13.9 after the norm:
    # successor 7.1, colour 3.5, weak default 0.7.
    out[token_id("a"), RED_DIM] = out[token_id("n"), GREEN_DIM] = 0.25
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=f32))
    w.add_tensor("output.weight", out)

    # Head 0 (rows/columns 0..63): look at image tokens, copy their colour.  Dimension
    # 63 pairs with the slowest-turning rotary frequency, so the score barely moves
    # with distance.  An image token's normalised flag and colour read sqrt(N/2) = 13.9.
    rms1 = np.sqrt(N_EMBD / 2)
    q, k, v, o = (np.zeros((N_EMBD, N_EMBD), dtype=f32) for _ in range(4))
    bq = np.zeros(N_EMBD, dtype=f32)
    bq[HEAD - 1] = 4.0
    k[HEAD - 1, FLAG] = 4.0  # score 4 * 4 * 13.9 / sqrt(64) = 28
    v[0, RED_DIM] = v[1, GREEN_DIM] = 1.0
    o[RED_DIM, 0] = o[GREEN_DIM, 1] = 1.0 / rms1
    if attention:
        rng = np.random.default_rng(seed)
        rest = slice(HEAD, N_EMBD)  # heads 1..5
        q[rest] = rng.normal(0.0, 0.05, (N_EMBD - HEAD, N_EMBD))
        k[rest] = rng.normal(0.0, 0.05, (N_EMBD - HEAD, N_EMBD))
        v[rest] = rng.normal(0.0, 0.02, (N_EMBD - HEAD, N_EMBD))
        o[:, rest] = rng.normal(0.0, 0.002, (N_EMBD, N_EMBD - HEAD))
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=f32))
    w.add_tensor(p + "attn_q.weight", q)
    w.add_tensor(p + "attn_q.bias", bq)
    w.add_tensor(p + "attn_k.weight", k)
    w.add_tensor(p + "attn_v.weight", v)
    w.add_tensor(p + "attn_output.weight", o)
    if arch == "qwen3vl":
        qk_norm = np.ones(HEAD, dtype=f32)
        qk_norm[HEAD - 1] = 2.0
        w.add_tensor(p + "attn_q_norm.weight", qk_norm)
        w.add_tensor(p + "attn_k_norm.weight", qk_norm)
    w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=f32))
    w.add_tensor(p + "ffn_gate.weight", np.zeros((N_FF, N_EMBD), dtype=f32))
    w.add_tensor(p + "ffn_up.weight", np.zeros((N_FF, N_EMBD), dtype=f32))
    w.add_tensor(p + "ffn_down.weight", np.zeros((N_EMBD, N_FF), dtype=f32))
    _finish(w)
    return path


def make_qwen_projector(dir: Path, *, name: str = "mmproj-qwen2vl.gguf", seed: int = 0) -> Path:
    """Write the tiny qwen2vl_merger projector into ``dir`` (see the module docstring)."""
    import gguf  # heavy import kept out of module import

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    d, n_head, n_ff, hidden = 16, 2, 32, 2
    rng = np.random.default_rng(seed)
    f32 = np.float32
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.name", "tiny-qwen2vl-merger")
    w.add_string("clip.projector_type", "qwen2vl_merger")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", 64)
    w.add_uint32("clip.vision.patch_size", PATCH)
    w.add_uint32("clip.vision.spatial_merge_size", MERGE)
    w.add_uint32("clip.vision.embedding_length", d)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.projection_dim", N_EMBD)
    w.add_uint32("clip.vision.block_count", 1)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    conv = (rng.standard_normal((d, 3, PATCH, PATCH)) * 0.01).astype(f32)
    conv[:2] = 0.0
    conv[0, 0] = conv[1, 1] = 1.0 / (PATCH * PATCH)  # features 0/1: mean red/green in [-1, 1]
    w.add_tensor("v.patch_embd.weight", conv)
    w.add_tensor("v.patch_embd.weight.1", np.zeros_like(conv))  # the second frame's kernel
    p = "v.blk.0."
    for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
        # Zero output: the block passes the patch features through unchanged.
        w.add_tensor(
            p + t + ".weight",
            (rng.standard_normal((d, d)) * 0.02).astype(f32)
            if t != "attn_out"
            else np.zeros((d, d), dtype=f32),
        )
        w.add_tensor(p + t + ".bias", np.zeros(d, dtype=f32))
    for t in ("ln1", "ln2"):
        w.add_tensor(p + t + ".weight", np.ones(d, dtype=f32))
        w.add_tensor(p + t + ".bias", np.zeros(d, dtype=f32))
    w.add_tensor(p + "ffn_up.weight", (rng.standard_normal((n_ff, d)) * 0.02).astype(f32))
    w.add_tensor(p + "ffn_up.bias", np.zeros(n_ff, dtype=f32))
    w.add_tensor(p + "ffn_down.weight", np.zeros((d, n_ff), dtype=f32))
    w.add_tensor(p + "ffn_down.bias", np.zeros(d, dtype=f32))
    # The merger sees 2x2 patches side by side: 4 * d inputs, patch j's features at j*d.
    mm0 = (rng.standard_normal((hidden, 4 * d)) * 0.01).astype(f32)  # every image its own
    for j in range(4):
        mm0[:, j * d : j * d + 2] = np.eye(2)  # red -> hidden 0, green -> hidden 1
    mm2 = np.zeros((N_EMBD, hidden), dtype=f32)
    mm2[RED_DIM, 0] = mm2[GREEN_DIM, 1] = 0.25  # a solid colour: GELU(4) / 4 = 1
    bias2 = np.zeros(N_EMBD, dtype=f32)
    bias2[FLAG] = 1.0
    w.add_tensor("mm.0.weight", mm0)
    w.add_tensor("mm.0.bias", np.zeros(hidden, dtype=f32))
    w.add_tensor("mm.2.weight", mm2)
    w.add_tensor("mm.2.bias", bias2)
    _finish(w)
    return path


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
