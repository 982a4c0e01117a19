"""A request's options as the engine's types: sampling, per-request fields, load fields.

``api.options`` merges and checks the option layers (Ollama's defaults, the
model's PARAMETERs, the request's ``options``) into one map of values;
:func:`resolve_options` splits that map into what the runner takes: the
:class:`~localllm.runner.messages.SamplingParams`, the per-request fields of a
``CompletionRequest`` and :class:`LoadFields`, the load-time options the
scheduler compares to decide on a reload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from localllm.api.options import merge_options
from localllm.api.speculation import Speculation, speculation
from localllm.runner.messages import LoadOptions, SamplingParams, from_dict


@dataclass(frozen=True)
class LoadFields:
    """Load-time options; a runner loaded with different values must be reloaded.

    ``None`` (and ``num_gpu == -1``) mean "automatic", which compares equal to
    itself, so two automatic requests never force a reload.
    """

    num_ctx: int | None = None
    num_batch: int = 512
    num_gpu: int = -1
    main_gpu: int | None = None
    use_mmap: bool | None = None
    num_thread: int = 0
    num_parallel: int | None = None

    def apply(self, base: LoadOptions) -> LoadOptions:
        """``base`` with every explicitly chosen field overridden."""
        # num_batch is the micro-batch (Ollama's runner computes one num_batch at a time);
        # a step may still hold several of them (LoadOptions.n_batch).
        out = replace(base, n_batch=max(base.n_batch, self.num_batch), n_ubatch=self.num_batch)
        if self.num_ctx is not None:
            out.n_ctx = self.num_ctx
        if self.num_gpu >= 0:
            out.n_gpu_layers = self.num_gpu
        if self.main_gpu is not None:
            out.main_gpu = self.main_gpu
        if self.use_mmap is not None:
            out.use_mmap = self.use_mmap
        if self.num_thread > 0:
            out.n_threads = self.num_thread
        if self.num_parallel is not None:
            out.n_parallel = self.num_parallel
        return out


@dataclass
class ResolvedOptions:
    """The merged, validated options of one request."""

    sampling: SamplingParams
    load: LoadFields
    num_predict: int = -1
    stop: list[str] = field(default_factory=list)
    num_keep: int = 4
    speculation: Speculation = field(default_factory=Speculation)
    values: dict[str, Any] = field(default_factory=dict)  # the merged map, for /api/show etc.


def resolve_options(
    model_params: Mapping[str, Any] | None,
    request_options: Mapping[str, Any] | None,
    *,
    defaults: Mapping[str, Any] | None = None,
    has_draft: bool = False,
) -> ResolvedOptions:
    """The options merged and checked (``api.options.merge_options``), as the engine's types.

    ``has_draft``: the model has a draft model, so speculation defaults to it.
    Raises :class:`~localllm.errors.InvalidRequest`.
    """
    values = merge_options(model_params, request_options, defaults=defaults)
    # Each field takes the option of its name (SamplingParams' grammar is no option).
    return ResolvedOptions(
        sampling=from_dict(SamplingParams, values),
        load=from_dict(LoadFields, values),
        num_predict=values["num_predict"],
        stop=list(values["stop"]),
        num_keep=values["num_keep"],
        speculation=speculation(values, has_draft=has_draft),
        values=values,
    )
