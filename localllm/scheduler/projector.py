"""What a vision projector (mmproj GGUF) costs in memory: ``projector_cost(path)``.

The planner adds it to the device the runner loads the projector on (the first
offload device, or RAM): the weights as the file's tensors, plus libmtmd's
compute buffer for one image, estimated from the ViT's shape (``clip.vision.*``)
as the input image in f32, the widest FFN activation, and either the attention
scores (``heads · n²`` f32, without flash attention) or three ``n · width``
activations (with it), ``n`` being the image's patches.  Checked against
libmtmd's own log for a SigLIP-400M-shaped projector at 448 px (1024 patches):
32.7 vs 32.6 MiB with flash attention, 87.7 vs 84.3 MiB without.

The image tokens' KV cache needs nothing extra: they occupy context cells like
text tokens, and the KV cache is sized by the context length.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localllm.gguf.reader import Header, read_header

DEFAULT_PATCHES = 1024  # a projector with dynamic resolution and no fixed image size


@dataclass(frozen=True)
class ProjectorCost:
    weights: int
    compute: int
    image_tokens: int = 0  # patches of one fixed-size image (0 = dynamic resolution)

    @property
    def total(self) -> int:
        return self.weights + self.compute


def _int(kv: dict[str, object], key: str, default: int = 0) -> int:
    v = kv.get(key, default)
    return int(v) if isinstance(v, (int, float)) else default


def projector_cost(path: str | Path, flash_attention: bool = True) -> ProjectorCost:
    """Weights and compute-buffer bytes of the projector at ``path`` (reads its header)."""
    return header_cost(read_header(Path(path)), flash_attention)


def header_cost(h: Header, flash_attention: bool = True) -> ProjectorCost:
    """``projector_cost`` from a header already read (a remote one: store/remote.py)."""
    kv = h.kv
    weights = sum(t[2] for t in h.tensors)
    d = _int(kv, "clip.vision.embedding_length")
    n_ff = _int(kv, "clip.vision.feed_forward_length")
    heads = max(_int(kv, "clip.vision.attention.head_count", 1), 1)
    size = _int(kv, "clip.vision.image_size")
    patch = max(_int(kv, "clip.vision.patch_size", 14), 1)
    n = (size // patch) ** 2 if size else DEFAULT_PATCHES
    image = 3 * 4 * (size * size if size else n * patch * patch)
    attn = 3 * 4 * n * d if flash_attention else 4 * heads * n * n + 4 * n * d
    compute = image + 4 * n * n_ff + attn
    return ProjectorCost(weights, compute, n if size else 0)
