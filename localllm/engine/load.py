"""What one engine loads, and what it reports of the load.

:func:`load` turns the runner's ``LoadOptions`` into the native objects an
``Engine`` steps with: the model placed as the planner said (``plugins.place``),
its context sized for ``n_parallel`` slots, the batch, and the vision projector
and draft model when the options name them.  Whatever was made before a failure
is freed before the error goes on.  :func:`engine_info` and :func:`memory_report`
are what the runner's ``loaded`` frame carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from localllm.engine import plugins
from localllm.engine.device_sampling import wanted
from localllm.engine.draft import Drafter
from localllm.engine.embed import POOLING_RANK
from localllm.engine.model import Batch, Context, Model, buffer_sizes, no_parts
from localllm.engine.park import PromptCache
from localllm.engine.vision import Projector, load_projector
from localllm.hardware.cpu import default_threads
from localllm.runner.messages import LoadOptions


@dataclass
class Loaded:
    """The native objects of one engine, and the sizes they were made with."""

    model: Model
    ctx: Context
    batch: Batch
    projector: Projector | None
    drafter: Drafter | None
    n_batch: int  # tokens one step may hold
    n_ubatch: int  # tokens one llama.cpp micro-batch computes
    n_ctx_slot: int  # each slot's context, which the engine keeps (one unified KV buffer)


def load(model_paths: list[str], opts: LoadOptions) -> Loaded:
    """Load the model, its context, batch, projector and draft model for ``opts``."""
    placement = plugins.place(opts)
    model = Model(
        model_paths,
        n_gpu_layers=opts.n_gpu_layers,
        main_gpu=opts.main_gpu,
        use_mmap=opts.use_mmap,
        **placement,
    )
    n_par = max(1, opts.n_parallel)
    # Every decoding slot adds one token per step, so a batch must hold them all.
    # Pooled embeddings need a whole input in one micro-batch: there the step is one.
    n_batch = max(opts.n_ubatch if opts.embedding else opts.n_batch, n_par, 1)
    n_ubatch = n_batch if opts.embedding else max(1, min(opts.n_ubatch, n_batch))
    threads = opts.n_threads or default_threads()
    made: list[Context | Batch | Projector] = []
    try:
        ctx = Context(
            model,
            n_ctx=max(opts.n_ctx, 8) * n_par,
            n_seq_max=n_par,
            n_batch=n_batch,
            n_ubatch=n_ubatch,
            n_threads=threads,
            flash_attn=opts.flash_attn,
            kv_type=opts.kv_type,
            embeddings=opts.embedding,
            pooling=POOLING_RANK if opts.rerank else -1,  # -1: the GGUF's own
            device_sampling=wanted(opts, model.load_log),
        )
        made.append(ctx)
        # One unified KV buffer (as llama-server does): per-sequence streams would make
        # llama.cpp split every mixed batch into equal per-sequence micro-batches.  The
        # per-slot limit is then ours to keep, and keeping it means the buffer never fills.
        n_ctx_slot = min(max(opts.n_ctx, 8), ctx.n_ctx // n_par)
        batch = Batch(n_batch)
        made.append(batch)
        projector = load_projector(opts, model, placement["devices"], threads)
        if projector is not None:
            made.append(projector)
        drafter = (
            Drafter(
                opts.draft,
                model,
                opts,
                placement,
                n_seq=n_par,
                n_ctx_slot=n_ctx_slot,
                n_batch=n_batch,
                n_threads=threads,
            )
            if opts.draft
            else None
        )
    except BaseException:
        for obj in reversed(made):  # whatever was made before the failure
            obj.close()
        model.close()
        raise
    if opts.embedding:
        ctx.set_embeddings(False)  # switched on only while embedding
    return Loaded(model, ctx, batch, projector, drafter, n_batch, n_ubatch, n_ctx_slot)


class EngineInfo(TypedDict):
    """The engine's facts as the runner's ``loaded`` frame carries them."""

    n_ctx: int  # per slot
    n_ctx_train: int
    n_vocab: int
    n_layer: int
    n_embd: int
    n_parallel: int
    n_batch: int
    bos: str
    eos: str
    chat_template: str | None
    description: str
    embedding: bool
    vision: bool
    draft: bool


def engine_info(loaded: Loaded, n_parallel: int, embedding: bool) -> EngineInfo:
    m = loaded.model
    return {
        "n_ctx": loaded.n_ctx_slot,
        "n_ctx_train": m.n_ctx_train,
        "n_vocab": m.n_vocab,
        "n_layer": m.n_layer,
        "n_embd": m.n_embd,
        "n_parallel": n_parallel,
        "n_batch": loaded.n_batch,
        "bos": m.token_text(m.bos) if m.bos >= 0 else "",
        "eos": m.token_text(m.eos) if m.eos >= 0 else "",
        "chat_template": m.chat_template,
        "description": m.description,
        "embedding": embedding,
        "vision": loaded.projector is not None and loaded.projector.vision,
        "draft": loaded.drafter is not None,
    }


def memory_report(
    loaded: Loaded, load_log: str, parked: PromptCache | None
) -> dict[str, dict[str, int]]:
    """Bytes llama.cpp allocated per device, from its load-time log lines, with the
    projector's and the draft model's (each on its own device)."""
    report = buffer_sizes(load_log)
    if parked is not None:  # counted as it fills (runner/resident.py)
        report.setdefault("CPU", no_parts())["cache"] = parked.budget
    for extra in (loaded.projector, loaded.drafter):
        for dev, use in (extra.memory() if extra is not None else {}).items():
            d = report.setdefault(dev, no_parts())
            for k, v in use.items():
                d[k] += v
    return report
