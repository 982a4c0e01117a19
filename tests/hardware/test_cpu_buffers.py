"""The CPU's extra buffer types as the probe reports them: parsed, checked, on the CPU device."""

from __future__ import annotations

from localllm.hardware.cpu import CPUInfo
from localllm.hardware.cpu_buffers import BufferRule, ExtraBuffer, parse_extra_buffers
from localllm.hardware.detect import build_hardware

CPU = CPUInfo("Test CPU", "x86_64", 8, 16, 64 << 30, 40 << 30, ("avx2", "amx_int8"))

AMX = {
    "name": "AMX",
    "rules": [
        {
            "type": 8,
            "name": "q8_0",
            "dims": 2,
            "k": 32,
            "rows": 32,
            "copy": 19922944,
            "size": 17825792,
        },
        {
            "type": 1,
            "name": "f16",
            "dims": 2,
            "k": 16,
            "rows": 32,
            "copy": 33554432,
            "size": 33554432,
        },
    ],
}


def test_rules_say_what_a_buffer_type_takes_and_what_the_copy_costs() -> None:
    (amx,) = parse_extra_buffers([AMX])
    assert amx.name == "AMX" and [r.type_name for r in amx.rules] == ["q8_0", "f16"]
    rule = amx.rule_for(8, 2, 4096, 1024)
    assert rule is not None and rule.copy_bytes(17825792) == 19922944
    assert amx.rule_for(8, 2, 4096, 1000) is None  # rows not in groups of 32
    assert amx.rule_for(1, 2, 8, 64) is None  # a row of 8 values: AMX wants 16
    assert amx.rule_for(8, 3, 4096, 1024) is None  # no expert stacks (MUL_MAT_ID)
    assert amx.rule_for(12, 2, 4096, 1024) is None  # no Q4_K rule reported


def test_malformed_reports_are_dropped_not_trusted() -> None:
    bad_rules = [
        None,
        {"type": 2},
        {"type": -1, "dims": 2, "k": 32, "rows": 8, "copy": 1, "size": 1},
        {"type": 2, "dims": 2, "k": 0, "rows": 8, "copy": 1, "size": 1},
        {"type": 2, "dims": 2, "k": 32, "rows": 8, "copy": 1, "size": 0},
        {"type": True, "dims": 2, "k": 32, "rows": 8, "copy": 1, "size": 1},
    ]
    raw = [AMX, {"name": 3}, "AMX", {"name": "CPU_REPACK", "rules": bad_rules}]
    assert [(b.name, len(b.rules)) for b in parse_extra_buffers(raw)] == [
        ("AMX", 2),
        ("CPU_REPACK", 0),
    ]
    assert parse_extra_buffers(None) == parse_extra_buffers({"AMX": 1}) == ()


def test_the_cpu_device_carries_them_and_gpus_say_if_they_have_a_host_buffer() -> None:
    answer = {
        "ok": True,
        "cpu_buffers": [AMX],
        "devices": [
            {"name": "CUDA0", "type": 1, "free": 8, "total": 8, "host_buffer": True},
            {"name": "RPC[h:1]", "type": 1, "free": 8, "total": 8, "host_buffer": False},
            {"name": "CPU", "type": 0, "free": 8, "total": 8, "host_buffer": "yes"},
        ],
    }
    hw = build_hardware(answer, CPU, [])
    cuda, rpc, cpu = hw.devices
    assert cuda.host_buffer and not rpc.host_buffer and not cpu.host_buffer
    assert cpu.extra_buffers == (
        ExtraBuffer(
            "AMX",
            (
                BufferRule(8, 2, 32, 32, 19922944, 17825792, "q8_0"),
                BufferRule(1, 2, 16, 32, 33554432, 33554432, "f16"),
            ),
        ),
    )
    assert cuda.extra_buffers == rpc.extra_buffers == ()
    # A probe that did not report them (or failed) leaves the CPU without: nothing counted.
    hw = build_hardware({"ok": False, "error": "x"}, CPU, [])
    assert [d.extra_buffers for d in hw.devices] == [()]
