"""Settings of scheduling, planning and the runner: how many models and sequences, how
long they stay, how memory is shared out, and how the engine steps.  Read through
``config.X``.
"""

from __future__ import annotations

from localllm.config_setting import Setting
from localllm.config_values import (
    CpuRepack,
    FlashAttention,
    KVType,
    LLMLibrary,
    StepBudget,
    parse_bool,
    parse_cpu_repack,
    parse_duration,
    parse_engine_spec,
    parse_flash_attention,
    parse_kv_type,
    parse_list,
    parse_llm_library,
    parse_load_timeout,
    parse_nonneg_int,
    parse_ollama_llm_library,
    parse_prompt_cache,
    parse_size,
    parse_step_budget,
)
from localllm.ollama_env import go_bool, go_uint

KEEP_ALIVE = Setting(
    "LOCALLLM_KEEP_ALIVE",
    parse_duration,
    300.0,
    "How long an idle model stays loaded (duration; negative = forever).",
    ollama="OLLAMA_KEEP_ALIVE",
)
NUM_PARALLEL = Setting(
    "LOCALLLM_NUM_PARALLEL",
    parse_nonneg_int,
    4,
    "Concurrent sequences (slots) per loaded model.",
    ollama="OLLAMA_NUM_PARALLEL",
)
MAX_LOADED_MODELS = Setting(
    "LOCALLLM_MAX_LOADED_MODELS",
    parse_nonneg_int,
    0,
    "Most models loaded at once (0 = 3 per GPU, 3 on CPU).",
    ollama="OLLAMA_MAX_LOADED_MODELS",
)
MAX_LOADED_PER_GPU = 3  # what MAX_LOADED_MODELS=0 allows per GPU (and on a CPU-only machine)
MAX_QUEUE = Setting(
    "LOCALLLM_MAX_QUEUE",
    parse_nonneg_int,
    512,
    "Pending requests allowed before the daemon answers 503.",
    ollama="OLLAMA_MAX_QUEUE",
    ollama_parse=go_uint,
)
CONTEXT_LENGTH = Setting(
    "LOCALLLM_CONTEXT_LENGTH",
    parse_nonneg_int,
    0,
    "Default context length (0 = chosen from available memory).",
    ollama="OLLAMA_CONTEXT_LENGTH",
)
FLASH_ATTENTION: Setting[FlashAttention] = Setting(
    "LOCALLLM_FLASH_ATTENTION",
    parse_flash_attention,
    "auto",
    "Flash attention: on, off or auto.",
    ollama="OLLAMA_FLASH_ATTENTION",
)
KV_CACHE_TYPE: Setting[KVType] = Setting(
    "LOCALLLM_KV_CACHE_TYPE",
    parse_kv_type,
    "f16",
    "KV cache type: f16, q8_0, q4_0 or f32 (quantized ones need flash attention, else f16).",
    ollama="OLLAMA_KV_CACHE_TYPE",
)
LOAD_TIMEOUT = Setting(
    "LOCALLLM_LOAD_TIMEOUT",
    parse_load_timeout,
    300.0,
    "How long a model load may go without progress (more of the file read, more memory "
    "filled, a log line) before it is abandoned, as Ollama's: a slow disk is not a stall. "
    "0 or negative = no limit.",
    ollama="OLLAMA_LOAD_TIMEOUT",
)
RUNNER_TIMEOUT = Setting(
    "LOCALLLM_RUNNER_TIMEOUT",
    parse_duration,
    30.0,
    "How long a runner may show no sign of life before the daemon kills it, fails its requests "
    "and reloads the model (0 or negative = never). A runner's thread reports every second even "
    "in a long load or step: silence means stopped or frozen; 30 s leaves room to swap.",
)
GPU_OVERHEAD = Setting(
    "LOCALLLM_GPU_OVERHEAD",
    parse_size,
    0,
    "Memory of each GPU kept free for other programs, e.g. 1GiB or bytes; the planner "
    "offloads less and picks a shorter automatic context.",
    ollama="OLLAMA_GPU_OVERHEAD",
    ollama_parse=go_uint,
)
SCHED_SPREAD = Setting(
    "LOCALLLM_SCHED_SPREAD",
    parse_bool,
    False,
    "Spread every model over all GPUs by their free memory, even when fewer would hold it.",
    ollama="OLLAMA_SCHED_SPREAD",
    ollama_parse=go_bool("OLLAMA_SCHED_SPREAD"),
)
LLM_LIBRARY: Setting[LLMLibrary] = Setting(
    "LOCALLLM_LLM_LIBRARY",
    parse_llm_library,
    "",
    "Plan models only on this library's GPUs: cuda, rocm, vulkan, metal, or cpu (no layer on "
    "any GPU); Ollama's names (cuda_v12, rocm_v6, cpu_avx2) are read too; default: every device.",
    ollama="OLLAMA_LLM_LIBRARY",
    ollama_parse=parse_ollama_llm_library,
)
CPU_REPACK: Setting[CpuRepack] = Setting(
    "LOCALLLM_CPU_REPACK",
    parse_cpu_repack,
    "auto",
    "Repacked copies of the weights the CPU computes with (llama.cpp's extra CPU buffer "
    "types: AMX, CPU_REPACK; llama-bench's --repack): on, off, or auto, which first runs "
    "each type's kernels on a small product in a throwaway process (once per boot) and "
    "leaves out a type that crashes or computes wrong there, as AMX does where ggml was "
    "built by a compiler that drops its tile setup (GCC 12). off if runners crash with "
    "SIGILL or SIGSEGV on a CPU with AMX.",
)
NUM_THREAD = Setting(
    "LOCALLLM_NUM_THREAD", parse_nonneg_int, 0, "CPU threads for inference (0 = physical cores)."
)
DRAFT_GATE = Setting(
    "LOCALLLM_DRAFT_GATE",
    parse_bool,
    True,
    "Default speculation (prompt lookup, 'auto') drafts only the tokens whose chance beats "
    "what their rows cost the batch, from measured step times, and stretches no step past "
    "1.5x: none on a busy compute-bound server. false = draft as each request's text allows.",
)
STEP_BUDGET = Setting(
    "LOCALLLM_STEP_BUDGET",
    parse_step_budget,
    StepBudget(),
    "How much one engine step may carry while requests are generating: N tokens (their "
    "own plus new prompts', prompts getting at least a quarter), or Nms, a step time the "
    "engine keeps to from its measured step costs. Lower keeps running streams' "
    "inter-token latency steady while prompts arrive, at the cost of the new prompts' "
    "time to first token; 0 = prompts take a whole batch (2048 tokens), as llama-server.",
)
PROMPT_CACHE = Setting(
    "LOCALLLM_PROMPT_CACHE",
    parse_prompt_cache,
    -1,
    "Host memory per loaded model for the cached prompts of idle slots, e.g. 2GiB: when a "
    "request starts they leave the KV cache (which every step attends over) and come back "
    "when a prompt continues them, as llama-server's --cache-ram. auto or -1 (the default) = "
    "as much as the model's KV cache, at most 8 GiB; 0 = off (idle slots keep their cells "
    "in the KV cache).",
)
PROMPT_CACHE_DISK = Setting(
    "LOCALLLM_PROMPT_CACHE_DISK",
    parse_size,
    4 << 30,
    "Disk space for cached prompts, shared by all models, e.g. 10GiB: what the prompt cache "
    "holds in memory is also written to prompts/ in the cache folder (LOCALLLM_CACHE; with "
    "only LOCALLLM_HOME set, <home>/cache), keyed by model, adapters and tokens, so a model "
    "reload, an idle unload or a daemon restart does not evaluate a long shared prefix "
    "again; the least recently used go first. Needs LOCALLLM_PROMPT_CACHE on; 0 = off.",
)
RPC_WORKERS: Setting[list[str]] = Setting(
    "LOCALLLM_RPC_WORKERS",
    parse_list,
    [],
    "ggml RPC workers (host:port, comma-separated) whose devices models may be placed on; "
    "see 'localllm worker'.",
)
RUNNER_ENGINE = Setting(
    "LOCALLLM_RUNNER_ENGINE",
    parse_engine_spec,
    "localllm.engine.engine:Engine",
    "For tests only: the engine class the runner child loads (module:Class), "
    "e.g. a fake one that provokes crashes and slow loads.",
)


def max_loaded_models(n_gpus: int) -> int:
    """``LOCALLLM_MAX_LOADED_MODELS`` with 0 resolved: 3 per GPU, 3 on a CPU-only machine
    (the caller counts GPUs: ``hardware.detect`` runs a probe, which this module must not)."""
    return MAX_LOADED_MODELS.get() or MAX_LOADED_PER_GPU * max(n_gpus, 1)
