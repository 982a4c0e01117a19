"""The CPU backend's extra buffer types, asked of ggml in a native process (the probe child).

llama.cpp keeps a repacked copy of a weight the CPU holds in the first of these
buffer types that takes it (AMX on Xeons with AMX, CPU_REPACK for Q4_0, Q4_K,
IQ4_NL... on AVX2, AVX-512 or ARM, KleidiAI on ARM).  Which ones exist, and
what each takes, depends on the CPU and on how ggml was built, so nothing here
guesses from CPU flags: ``extra_buffers`` puts every ggml type, as a 2-D matrix
and as a 3-D expert stack, to each buffer type with llama.cpp's own loader test
(``ll_cpu_extra_buft_takes``), and finds the column and row multiples it needs.
The answer is plain JSON for the probe's report; ``hardware.cpu_buffers`` reads
it back for the planner, and ``host_buffer_names`` tells the runner's memory
report that these buffers are system RAM.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from itertools import product
from typing import Any, TypedDict

from localllm.engine.binding import native

# The shape each type is first tried at: a multiple of every ggml block and of every
# row grouping a repacking kernel wants, so a "no" there is a no for any real weight.
REF = 4096
N_EXPERTS = 8  # the stack depth of the 3-D (MUL_MAT_ID) test; any depth > 1 answers alike


def _smallest(ok: Callable[[int], bool]) -> int:
    """The smallest power of two that ``ok`` accepts; ``REF`` when none below it does
    (the caller has seen ``REF`` accepted).  ggml's blocks and row groups are powers of
    two, so a rule "a multiple of d" is found exactly."""
    d = 1
    while d < REF and not ok(d):
        d *= 2
    return d


def _multiples(takes: Callable[[int, int], bool]) -> tuple[int, int]:
    """The column (values per row) and row multiples a buffer type needs for a type."""
    return _smallest(lambda k: takes(k, REF)), _smallest(lambda r: takes(REF, r))


def _names(n: int, get: Callable[[int, Any, int], int]) -> list[str]:
    ffi, _ = native()
    buf = ffi.new("char[]", 128)
    out = []
    for i in range(n):
        get(i, buf, 128)
        out.append(ffi.string(buf).decode())
    return out


class Rule(TypedDict):
    """Which weights an extra buffer type takes, and what they cost there (``extra_buffers``)."""

    type: int
    name: str
    dims: int
    k: int
    rows: int
    copy: int
    size: int


class _BufferFields(TypedDict):
    name: str
    rules: list[Rule]


class Buffer(_BufferFields, total=False):
    """One extra buffer type; in ``auto``, ``cpu_check.annotate`` adds its verdict."""

    auto: bool  # LOCALLLM_CPU_REPACK=auto lets a load use it
    fault: str  # what its self-test found ("": it works)


def extra_buffers() -> list[Buffer]:
    """Each extra buffer type, in llama.cpp's order, with the weights it takes.

    A rule ``{"type", "name", "dims", "k", "rows", "copy", "size"}`` says: a weight
    of ggml type ``type`` with ``dims`` dimensions (2: a matrix, 3: an expert
    stack) whose rows have a multiple of ``k`` values and whose row count is a
    multiple of ``rows`` goes there, and a ``size``-byte reference weight takes
    ``copy`` bytes there (AMX stores some types with extra per-block sums).
    """
    ffi, lib = native()
    copy, size = ffi.new("size_t *"), ffi.new("size_t *")
    types = [
        (t, ffi.string(lib.ll_ggml_type_name(t)).decode()) for t in range(lib.ll_ggml_type_count())
    ]
    out: list[Buffer] = []
    for i, name in enumerate(_names(lib.ll_cpu_extra_buft_count(), lib.ll_cpu_extra_buft_name)):
        rules: list[Rule] = []
        for (t, tname), (dims, n_mat) in product(types, ((2, 1), (3, N_EXPERTS))):
            takes = partial(_takes, lib, i, t, n_mat, copy, size)
            if not tname or not takes(REF, REF):
                continue
            ref_copy, ref_size = int(copy[0]), int(size[0])
            k, rows = _multiples(takes)
            rule: Rule = {
                "type": t,
                "name": tname,
                "dims": dims,
                "k": k,
                "rows": rows,
                "copy": ref_copy,
                "size": ref_size,
            }
            rules.append(rule)
        out.append({"name": name, "rules": rules})
    return out


def _takes(lib: Any, i: int, t: int, n_mat: int, copy: Any, size: Any, k: int, rows: int) -> bool:
    return bool(lib.ll_cpu_extra_buft_takes(i, t, k, rows, n_mat, copy, size) == 1)


def host_buffer_names() -> frozenset[str]:
    """Names of the CPU's extra buffer types (``"AMX"``, ``"CPU_REPACK"``): system RAM.

    Asked each time: LOCALLLM_CPU_REPACK=auto may take a type out of the list before a
    load (engine/cpu_check.py), and a few calls into the shim cost nothing next to a load.
    """
    _, lib = native()
    return frozenset(_names(lib.ll_cpu_extra_buft_count(), lib.ll_cpu_extra_buft_name))


# ---- what engine/cpu_check.py does with them (the calls stay with their owner) ----------


def buffer_names() -> list[str]:
    """The CPU backend's extra buffer types in this process, in llama.cpp's order."""
    _, lib = native()
    return _names(lib.ll_cpu_extra_buft_count(), lib.ll_cpu_extra_buft_name)


def type_names() -> list[str]:
    """ggml's weight types by id."""
    ffi, lib = native()
    return [ffi.string(lib.ll_ggml_type_name(t)).decode() for t in range(lib.ll_ggml_type_count())]


def selftest(
    i: int, t: int, k: int, rows: int, m: int, threads: int, rounds: int
) -> tuple[int, float]:
    """Extra buffer ``i``'s product of a ``t`` weight against the plain CPU's: (1 same,
    0 different, -1 not taken or not testable; the largest relative difference)."""
    ffi, lib = native()
    err = ffi.new("double *")
    rc = int(lib.ll_cpu_extra_buft_selftest(i, t, k, rows, m, threads, rounds, err))
    return rc, float(err[0])


def drop(name: str) -> int:
    """Take ``name`` out of the list llama.cpp's loaders read; < 0 when it stays."""
    _, lib = native()
    return int(lib.ll_cpu_extra_buft_drop(name.encode()))


def crash_hint(text: str) -> None:
    """The line the runner writes last if it dies of a signal."""
    _, lib = native()
    lib.ll_crash_hint(text.encode())
