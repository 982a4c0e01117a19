"""The planner's inputs and answer: ``PlanOptions``, ``DeviceUse`` and ``LoadPlan`` (plain data).

``planner.plan`` turns a ``ModelInfo`` and devices into a ``LoadPlan``; the
scheduler keeps the plan of every loaded model to judge what fits next to it,
and ``LoadPlan.apply`` fills the runner's ``LoadOptions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from localllm.gguf.info import ModelInfo
from localllm.runner.messages import LoadOptions

REMOTE_LIBRARY = "RPC"  # devices another machine serves over ggml RPC


@dataclass(frozen=True)
class PlanOptions:
    """What the request and the settings ask for."""

    num_ctx: int = 0  # per slot; 0 = automatic
    num_parallel: int = 1
    num_batch: int = 512
    num_gpu: int = -1  # -1 automatic, 0 CPU only, N = that many layers (llama.cpp count)
    kv_type: str = "f16"
    flash_attention: str = "auto"  # "on" | "off" | "auto"
    gpu_overhead: int = 0  # LOCALLLM_GPU_OVERHEAD, bytes kept free on each GPU
    available_ram: int = 0  # 0 = take the CPU device's free memory
    default_ctx: int = 0  # LOCALLLM_CONTEXT_LENGTH; 0 = VRAM tiers
    spread: bool = False  # LOCALLLM_SCHED_SPREAD: every usable GPU, by free memory
    # A vision projector loaded next to the model (scheduler/projector.py): its weights
    # and compute buffer go on the first offload device, or in RAM without one.
    projector_weights: int = 0
    projector_compute: int = 0
    # A draft model loaded next to the model (scheduler/draft.py): sized per context tried,
    # on the first device holding the model's layers, or in RAM without one.
    draft: ModelInfo | None = None
    use_mmap: bool = True  # mapped weights: a repacked matrix's file pages stay mapped too
    cpu_repack: str = "auto"  # LOCALLLM_CPU_REPACK: which repacked copies count (repack.py)

    @classmethod
    def from_config(cls, **overrides: Any) -> PlanOptions:
        """Options from the LOCALLLM_* settings, with ``overrides`` on top."""
        from localllm import config

        # Both settings are parsed (lower-cased, validated) by config's one parser.
        base = cls(
            num_parallel=max(config.NUM_PARALLEL.get(), 1),
            kv_type=config.KV_CACHE_TYPE.get(),
            flash_attention=config.FLASH_ATTENTION.get(),
            gpu_overhead=config.GPU_OVERHEAD.get(),
            default_ctx=config.CONTEXT_LENGTH.get(),
            spread=config.SCHED_SPREAD.get(),
            cpu_repack=config.CPU_REPACK.get(),
        )
        return replace(base, **overrides)

    @classmethod
    def from_load(cls, load: LoadOptions, **overrides: Any) -> PlanOptions:
        """From requested ``LoadOptions`` (``n_ctx`` 0 / ``n_gpu_layers`` -1 = automatic).

        The KV type and flash attention go through config's parsers, the same ones
        the settings use; a value outside them is a ``ValueError`` (LoadOptions are
        built from those settings, so one would be a bug, not a user's typo).
        """
        from localllm.config import parse_flash_attention, parse_kv_type

        return cls.from_config(
            num_ctx=load.n_ctx,
            num_parallel=max(load.n_parallel, 1),
            num_batch=load.n_ubatch,
            num_gpu=load.n_gpu_layers,
            kv_type=parse_kv_type(load.kv_type),
            flash_attention=parse_flash_attention(load.flash_attn),
            use_mmap=load.use_mmap,
            cpu_repack=load.cpu_repack,
            **overrides,
        )


@dataclass(frozen=True)
class DeviceUse:
    """Estimated bytes on one device (a GPU, or ``CPU`` for system RAM)."""

    name: str
    library: str
    layers: int  # layers placed here; the output layer counts as one
    weights: int
    kv: int
    graph: int
    free: int = 0  # what the device offered after reserves (0 = not checked)
    unified: bool = False  # a GPU whose memory is system RAM (Metal, integrated)

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.graph

    @property
    def remote(self) -> bool:
        """A device of another machine, reached over ggml RPC."""
        return self.library == REMOTE_LIBRARY


@dataclass(frozen=True)
class LoadPlan:
    """How to load one model, and what that will cost."""

    n_gpu_layers: int  # llama.cpp's count: n_layers + 1 puts everything on GPUs
    n_layers: int  # repeating layers + 1 (the output layer)
    n_ctx: int  # per slot
    n_parallel: int
    n_batch: int
    kv_type: str
    flash_attention: bool
    gpus: tuple[DeviceUse, ...]  # in llama.cpp device order: the last takes the top layers
    cpu: DeviceUse
    fits: bool
    reason: str
    ctx_reduced: bool = False
    notes: tuple[str, ...] = field(default=())
    n_cpu_moe: int = 0  # the expert tensors of the first N layers stay in RAM

    @property
    def vram(self) -> int:
        return sum(g.total for g in self.gpus)

    @property
    def ram(self) -> int:
        return self.cpu.total

    @property
    def total(self) -> int:
        return self.vram + self.ram

    @property
    def host_bytes(self) -> int:
        """What the plan takes out of system RAM: the CPU side and unified-memory GPUs."""
        return self.ram + sum(g.total for g in self.gpus if g.unified)

    @property
    def remote_bytes(self) -> int:
        return sum(g.total for g in self.gpus if g.remote)

    @property
    def kv_bytes(self) -> int:
        return self.cpu.kv + sum(g.kv for g in self.gpus)

    @property
    def fully_offloaded(self) -> bool:
        return self.n_gpu_layers >= self.n_layers

    @property
    def tensor_split(self) -> tuple[int, ...]:
        """Layers per GPU in llama.cpp order; they add up to ``n_gpu_layers``."""
        return tuple(g.layers for g in self.gpus)

    @property
    def split_mode(self) -> Literal["none", "layer"]:
        # One GPU: "none" pins every offloaded layer (and the graph) to it.
        return "none" if len(self.gpus) == 1 else "layer"

    def apply(self, load: LoadOptions) -> LoadOptions:
        """``load`` with this plan's context, KV type and placement filled in.

        llama.cpp gives the last ``n_gpu_layers`` layers to ``devices`` by
        cumulative ``tensor_split`` shares, so layer counts as shares put
        exactly the planned layers on each device.
        """
        kv = cast(Any, self.kv_type)  # always one of LoadOptions' KV types
        return replace(
            load,
            n_ctx=self.n_ctx,
            n_gpu_layers=self.n_gpu_layers,
            kv_type=kv,
            devices=[g.name for g in self.gpus],
            split_mode=self.split_mode,
            tensor_split=[float(n) for n in self.tensor_split],
            main_gpu=0,
            n_cpu_moe=self.n_cpu_moe,
        )
