"""A tiny vision projector GGUF (libmtmd's ``clip`` format) and tiny PNG images, for tests.

Owned by the engine; used by engine, runner and server tests of image input.

``make_projector(dir)`` writes a LLaVA-style projector (``clip.projector_type =
"mlp"``): a ViT whose patch embedding is a 16-pixel convolution on a 32-pixel
image (4 patches, so 4 image tokens), one block (which the LLaVA graph skips:
it reads the second-to-last layer), and an MLP ``mm.0`` -> GELU -> ``mm.2`` whose
output width is tests/support/tinymodel.py's ``N_EMBD``.  The weights are chosen, not
random, so that the text model's greedy output after an image depends on its
colour:

* patch feature 0 is the patch's mean red, feature 1 its mean green (pixels are
  normalised to [-1, 1] by mean 0.5 / std 0.5);
* ``mm.0`` scales each by 4, GELU keeps the positive one, and ``mm.2`` writes
  feature 0 onto token ``a``'s one-hot dimension and feature 1 onto ``n``'s.

The tiny text model (attention off) predicts the successor of whatever one-hot
token the last position holds, so a prompt ending in a red image continues
``RED_GREEDY`` ("bcd...z") and one ending in a green image ``GREEN_GREEDY``
("opq...z").  Other features carry small seeded random weights, so every image
gives its own embedding.

``make_projector(dir, realistic=True)`` instead writes a SigLIP-400M-shaped one
(27 blocks of width 1152, 16 heads, FFN 4304, 448-pixel images in 14-pixel
patches = 1024 tokens, f16 random weights; about 0.8 GiB) for the benchmark.

``png(width, height, rgb)`` builds a solid-colour PNG by hand (zlib only).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from tests.support.tinymodel import N_EMBD, token_id

IMAGE_SIZE = 32
PATCH = 16
N_IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2
RED_GREEDY = "bcdefghijklmnopqrstuvwxyz"
GREEN_GREEDY = "opqrstuvwxyz"
RED = (255, 0, 0)
GREEN = (0, 255, 0)


def png(width: int, height: int, rgb: tuple[int, int, int] = RED) -> bytes:
    """A solid-colour 8-bit RGB PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * width  # filter type 0 per row
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def make_projector(
    dir: Path,
    *,
    realistic: bool = False,
    n_layer: int = 27,
    name: str = "mmproj.gguf",
    seed: int = 0,
) -> Path:
    """Write a projector into ``dir`` and return its path (see the module docstring)."""
    import gguf  # heavy import kept out of module import

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    if realistic:
        d, n_head, n_ff, size, patch, hidden, layers = 1152, 16, 4304, 448, 14, 2048, n_layer
        dt: type[np.floating] = np.float16
    else:
        d, n_head, n_ff, size, patch, hidden, layers = 8, 2, 16, IMAGE_SIZE, PATCH, 2, 1
        dt = np.float32
    n_patches = (size // patch) ** 2
    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(dt)

    f32 = np.float32
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.name", "tiny-vision" if not realistic else "siglip-400m-shaped")
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", size)
    w.add_uint32("clip.vision.patch_size", patch)
    w.add_uint32("clip.vision.embedding_length", d)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.projection_dim", N_EMBD)
    w.add_uint32("clip.vision.block_count", layers)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    conv = rand(d, 3, patch, patch, std=0.01)
    if not realistic:
        conv[:2] = 0.0
        conv[0, 0] = 1.0 / (patch * patch)  # feature 0: mean red
        conv[1, 1] = 1.0 / (patch * patch)  # feature 1: mean green
    w.add_tensor("v.patch_embd.weight", conv)
    w.add_tensor("v.patch_embd.bias", np.zeros(d, dtype=f32))
    w.add_tensor(
        "v.position_embd.weight",
        rand(n_patches, d) if realistic else np.zeros((n_patches, d), dtype=f32),
    )
    for i in range(layers):
        p = f"v.blk.{i}."
        for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(p + t + ".weight", rand(d, d))
            w.add_tensor(p + t + ".bias", np.zeros(d, dtype=f32))
        for t in ("ln1", "ln2"):
            w.add_tensor(p + t + ".weight", np.ones(d, dtype=f32))
            w.add_tensor(p + t + ".bias", np.zeros(d, dtype=f32))
        w.add_tensor(p + "ffn_up.weight", rand(n_ff, d))
        w.add_tensor(p + "ffn_up.bias", np.zeros(n_ff, dtype=f32))
        w.add_tensor(p + "ffn_down.weight", rand(d, n_ff))
        w.add_tensor(p + "ffn_down.bias", np.zeros(d, dtype=f32))
    mm0 = rand(hidden, d)
    mm2 = rand(N_EMBD, hidden)
    if not realistic:
        mm0[:] = 0.0
        mm0[0, 0] = mm0[1, 1] = 4.0
        mm2[:] = 0.0
        mm2[token_id("a"), 0] = mm2[token_id("n"), 1] = 5.0
        # Small seeded weights from the other features: every image its own embedding.
        extra = rng.standard_normal((hidden, d - 2)).astype(f32) * 0.01
        mm0[:, 2:] = extra
    w.add_tensor("mm.0.weight", mm0)
    w.add_tensor("mm.0.bias", np.zeros(hidden, dtype=f32))
    w.add_tensor("mm.2.weight", mm2)
    w.add_tensor("mm.2.bias", np.zeros(N_EMBD, dtype=f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
