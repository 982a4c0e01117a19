"""CPU and memory facts, from recorded /proc files and the live machine."""

from __future__ import annotations

from pathlib import Path

from localllm.hardware.cpu import cpu_info, parse_cpuinfo, parse_meminfo, parse_vm_stat

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
physical id\t: 0
core id\t: 0
flags\t\t: fpu sse sse2 pni ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512bw amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
physical id\t: 0
core id\t: 0
flags\t\t: fpu sse sse2 pni ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512bw amx_tile amx_int8

processor\t: 2
model name\t: Intel(R) Xeon(R) Platinum 8480+
physical id\t: 0
core id\t: 1
flags\t\t: fpu sse sse2 pni ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512bw amx_tile amx_int8
"""

ARM = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp sve i8mm bf16
CPU implementer\t: 0x41

processor\t: 1
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp sve i8mm bf16
"""

MEMINFO = """MemTotal:       32768000 kB
MemFree:         1000000 kB
MemAvailable:   20000000 kB
Buffers:          100000 kB
Cached:          5000000 kB
"""


def test_x86_cpuinfo() -> None:
    model, physical, flags = parse_cpuinfo(X86)
    assert model == "Intel(R) Xeon(R) Platinum 8480+"
    assert physical == 2  # two hyperthreads share core 0
    assert flags == (
        "amx_int8",
        "amx_tile",
        "avx",
        "avx2",
        "avx512bw",
        "avx512f",
        "f16c",
        "fma",
        "sse3",
        "sse4_1",
        "sse4_2",
        "ssse3",
    )


def test_arm_features() -> None:
    _, physical, flags = parse_cpuinfo(ARM)
    assert physical == 0  # unknown: the caller falls back to logical CPUs
    assert flags == ("bf16", "dotprod", "fp16", "i8mm", "neon", "sve")


def test_meminfo() -> None:
    assert parse_meminfo(MEMINFO) == (32768000 * 1024, 20000000 * 1024)
    old_kernel = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\n"
    assert parse_meminfo(old_kernel) == (1000 * 1024, 310 * 1024)


def test_vm_stat() -> None:
    text = (
        "Mach Virtual Memory Statistics: (page size of 16384 bytes)\n"
        "Pages free:                               10.\nPages active:  99.\n"
        "Pages inactive:                           5.\nPages speculative: 1.\n"
    )
    assert parse_vm_stat(text, 10**12) == 16 * 16384


def test_fake_root_with_a_cgroup_limit(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(X86)
    (tmp_path / "proc/meminfo").write_text(MEMINFO)
    cg = tmp_path / "sys/fs/cgroup"
    cg.mkdir(parents=True)
    (cg / "memory.max").write_text(str(8 * 1024**3))
    (cg / "memory.current").write_text(str(3 * 1024**3))
    info = cpu_info(tmp_path)
    assert info.total_ram == 8 * 1024**3  # the container's limit, not the host's RAM
    assert info.available_ram == 5 * 1024**3
    assert info.physical_cores >= 1 and "avx2" in info.flags
    (cg / "memory.max").write_text("max\n")
    assert cpu_info(tmp_path).available_ram == 20000000 * 1024


def test_live_machine() -> None:
    info = cpu_info()
    assert info.logical_cores >= 1 and 1 <= info.physical_cores <= info.logical_cores
    assert 0 < info.available_ram <= info.total_ram
    assert info.arch
