"""The CPU's extra buffer types as ggml answers for them; the memory report counts them as RAM."""

from __future__ import annotations

from pathlib import Path

from localllm.engine import cpu_buffers
from localllm.engine.binding import native
from localllm.engine.engine import Engine
from localllm.engine.model import buffer_sizes
from localllm.hardware.cpu_buffers import BufferRule, parse_extra_buffers
from tests.support.engine_steps import opts

MiB = 1024 * 1024
LOG = """load_tensors:          AMX model buffer size =    79.25 MiB
load_tensors:   CPU_Mapped model buffer size =    79.28 MiB
llama_kv_cache:        CPU KV buffer size =    16.00 MiB
llama_context:      CUDA0 compute buffer size =    64.62 MiB
"""


def test_each_rule_is_what_ggml_answers_at_its_edges() -> None:
    # Whatever this CPU has (AMX, CPU_REPACK, KleidiAI or nothing), each reported rule
    # holds at other multiples and fails just off them, and copies scale with the weight.
    ffi, lib = native()
    copy, size = ffi.new("size_t *"), ffi.new("size_t *")
    reported = cpu_buffers.extra_buffers()
    assert {b["name"] for b in reported} == cpu_buffers.host_buffer_names()
    for i, b in enumerate(parse_extra_buffers(reported)):
        for r in b.rules:

            def takes(k: int, rows: int, r: BufferRule = r, i: int = i) -> int:
                n_mat = 8 if r.dims == 3 else 1
                return int(lib.ll_cpu_extra_buft_takes(i, r.ggml_type, k, rows, n_mat, copy, size))

            k, rows = r.k_multiple, r.rows_multiple
            assert takes(k * 3, rows * 5) == 1, (b.name, r)
            assert copy[0] == r.copy_bytes(size[0]), (b.name, r)
            if rows > 1:
                assert takes(k * 3, rows + rows // 2) == 0, (b.name, r)
    # Not a buffer type there, not a ggml type: refused, not guessed.
    assert lib.ll_cpu_extra_buft_takes(len(reported), 1, 4096, 4096, 1, copy, size) == -1
    assert lib.ll_cpu_extra_buft_takes(0, 10_000, 4096, 4096, 1, copy, size) == -1


def test_extra_buffers_are_ram_in_the_memory_report() -> None:
    split = buffer_sizes(LOG, ram=())
    assert split["AMX"]["model"] == int(79.25 * MiB)
    merged = buffer_sizes(LOG, ram={"AMX"})
    assert set(merged) == {"CPU", "CUDA0"}
    assert merged["CPU"]["model"] == int(79.25 * MiB) + int(79.28 * MiB)
    assert merged["CPU"]["kv"] == 16 * MiB and merged["CUDA0"]["compute"] > 0


def test_a_load_reports_every_host_buffer_under_cpu(tiny: Path) -> None:
    with Engine([str(tiny)], opts()) as e:
        report = e.memory_report()
    assert set(report) == {"CPU"}, report


def test_the_probe_reports_them_with_the_devices() -> None:
    from localllm.engine.probe_child import collect

    answer = collect()
    assert answer["ok"], answer
    assert [b["name"] for b in answer["cpu_buffers"]] == [
        b["name"] for b in cpu_buffers.extra_buffers()
    ]
    assert all(isinstance(d["host_buffer"], bool) for d in answer["devices"])
