"""The CPU backend's extra buffer types as the probe reported them (plain data, no engine).

llama.cpp gives a weight the CPU keeps to the first buffer type in its CPU list
that takes it; with ``use_extra_bufts`` (its default, and ours) the list holds,
before the plain CPU buffer, the CPU backend's extra types: AMX, KleidiAI,
CPU_REPACK, each a repacked copy in anonymous memory.  The probe child asks
ggml what each one takes (``engine.cpu_buffers``); this module holds that
answer as ``ExtraBuffer`` rules, so the planner (scheduler/repack.py) can apply
llama.cpp's choice to a GGUF's tensors without loading it.  LOCALLLM_CPU_REPACK
changes the list (off: none; auto: the types whose self-test passed, see
``engine.cpu_check``), and the probe says what auto keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BufferRule:
    """Weights of one ggml type and rank that an extra buffer type takes."""

    ggml_type: int  # GGUF / ggml type id
    dims: int  # 2: a matrix (MUL_MAT); 3: an expert stack (MUL_MAT_ID)
    k_multiple: int  # values per row must be a multiple of this
    rows_multiple: int  # and the row count a multiple of this
    copy: int  # bytes a reference weight of ``size`` bytes takes there
    size: int
    type_name: str = ""

    def takes(self, ggml_type: int, dims: int, k: int, rows: int) -> bool:
        return (
            ggml_type == self.ggml_type
            and dims == self.dims
            and k % self.k_multiple == 0
            and rows % self.rows_multiple == 0
        )

    def copy_bytes(self, nbytes: int) -> int:
        """The copy of an ``nbytes`` weight: copies grow in step with their rows."""
        return nbytes * self.copy // self.size


@dataclass(frozen=True)
class ExtraBuffer:
    """One of the CPU backend's extra buffer types and the weights it takes."""

    name: str  # ggml's buffer type name: "AMX", "CPU_REPACK", "CPU_KLEIDIAI"
    rules: tuple[BufferRule, ...] = ()
    # What LOCALLLM_CPU_REPACK=auto makes of it here (engine/cpu_check.py): whether a load
    # may use it, and what its self-test found ("" = works, or not tested: on and off).
    auto: bool = True
    fault: str = ""

    def rule_for(self, ggml_type: int, dims: int, k: int, rows: int) -> BufferRule | None:
        return next((r for r in self.rules if r.takes(ggml_type, dims, k, rows)), None)


def _int(v: Any, least: int = 0) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= least else None


def _rule(raw: Any) -> BufferRule | None:
    if not isinstance(raw, dict):
        return None
    t, dims = _int(raw.get("type")), _int(raw.get("dims"), 2)
    k, rows = _int(raw.get("k"), 1), _int(raw.get("rows"), 1)
    copy, size = _int(raw.get("copy")), _int(raw.get("size"), 1)
    if t is None or dims is None or k is None or rows is None or copy is None or size is None:
        return None
    return BufferRule(t, dims, k, rows, copy, size, str(raw.get("name") or ""))


def parse_extra_buffers(raw: Any) -> tuple[ExtraBuffer, ...]:
    """The probe's ``cpu_buffers`` list as ``ExtraBuffer``s; malformed entries are dropped."""
    out = []
    for b in raw if isinstance(raw, list) else []:
        if not isinstance(b, dict) or not isinstance(b.get("name"), str):
            continue
        rules = [r for r in map(_rule, b.get("rules") or []) if r is not None]
        fault = b.get("fault")
        out.append(
            ExtraBuffer(
                b["name"],
                tuple(rules),
                b.get("auto") is not False,
                fault if isinstance(fault, str) else "",
            )
        )
    return tuple(out)
