"""What a draft model (Modelfile ``DRAFT``) costs in memory next to its model (pure).

The runner loads the draft in the same process with all its layers on the
first GPU device that holds layers of the model, or on the CPU when the model
has none offloaded; its context has as many KV cells as the model's (every
slot drafts for its own sequence).  So the planner adds, on that one device,
the draft's weights, its KV cache for the same cells, sized from the draft's
own header with the model's cache type, and its compute graph estimated as
for a fully offloaded model.  Its input embedding stays in RAM when the rest
is on a GPU, as for any model (llama.cpp runs ``get_rows`` on the CPU); in RAM
the CPU backend keeps repacked copies of its matrices too (scheduler/repack.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from localllm.gguf.info import ModelInfo
from localllm.hardware.cpu_buffers import ExtraBuffer
from localllm.scheduler.estimate import graph_bytes, host_graph_bytes, kv_cells, kv_layer_bytes
from localllm.scheduler.plan_types import DeviceUse
from localllm.scheduler.repack import repacked_bytes


@dataclass(frozen=True)
class DraftCost:
    """Bytes of a draft model on the GPU it goes to (all 0 when it stays in RAM) and in RAM."""

    gpu_weights: int
    gpu_kv: int
    gpu_graph: int
    ram_weights: int  # in RAM: everything; beside a GPU: the input embedding
    ram_kv: int
    ram_graph: int  # beside a GPU: the host side of its compute graph

    @property
    def gpu_total(self) -> int:
        return self.gpu_weights + self.gpu_kv + self.gpu_graph

    def onto(self, use: DeviceUse) -> DeviceUse:
        """``use`` (the draft's GPU, or ``CPU``) with the draft's bytes there added."""
        if use.name == "CPU":
            w, kv, g = self.ram_weights, self.ram_kv, self.ram_graph
        else:
            w, kv, g = self.gpu_weights, self.gpu_kv, self.gpu_graph
        return replace(use, weights=use.weights + w, kv=use.kv + kv, graph=use.graph + g)


def draft_cost(
    info: ModelInfo,
    n_ctx: int,
    n_parallel: int,
    n_batch: int,
    kv_type: str,
    flash_attention: bool,
    *,
    on_gpu: bool,
    extras: Sequence[ExtraBuffer] = (),
    use_mmap: bool = True,
) -> DraftCost:
    """The draft ``info``'s cost for ``n_parallel`` slots of ``n_ctx`` tokens; ``extras``:
    the CPU's extra buffer types the load can use (``repack.usable_extras``)."""
    kv = kv_layer_bytes(info, kv_cells(n_ctx, n_parallel), kv_type) * info.n_layers
    graph, _ = graph_bytes(info, n_ctx, n_parallel, n_batch, flash_attention, kv)
    body = sum(info.layer_bytes) + info.output_bytes + info.other_bytes
    if not on_gpu:
        copies = repacked_bytes(
            info, extras, max(info.n_layers, len(info.layer_bytes)), use_mmap=use_mmap
        )
        return DraftCost(0, 0, 0, body + info.token_embd_bytes + copies, kv, graph)
    return DraftCost(body, kv, graph, info.token_embd_bytes, 0, host_graph_bytes(info, n_batch))
