"""CPU and system memory facts: cores, RAM and the instruction-set flags ggml cares about.

Linux reads ``/proc/cpuinfo`` and ``/proc/meminfo`` (and the cgroup v2 memory
limit, because in a container ``MemAvailable`` describes the host, not us);
macOS asks ``sysctl`` and ``vm_stat``.  Parsers are plain functions on text so
tests feed them recorded files.  Nothing here imports the native module.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

# ISA flags that decide which ggml CPU kernels run; everything else in
# /proc/cpuinfo is noise for a user reading `localllm doctor`.
_X86_FLAGS = ("sse3", "ssse3", "sse4_1", "sse4_2", "fma", "f16c", "bmi2")
_X86_PREFIXES = ("avx", "amx")
# On arm64 Linux the "Features" line uses these names (asimd is NEON).
_ARM_FLAGS = {
    "asimd": "neon",
    "asimddp": "dotprod",
    "asimdhp": "fp16",
    "fphp": "fp16",
    "i8mm": "i8mm",
    "sve": "sve",
    "sve2": "sve2",
    "bf16": "bf16",
    "sme": "sme",
}


@dataclass(frozen=True)
class CPUInfo:
    """The host CPU and its memory, in bytes."""

    model: str
    arch: str  # platform.machine(): x86_64, aarch64, arm64
    physical_cores: int
    logical_cores: int
    total_ram: int
    available_ram: int
    flags: tuple[str, ...]  # sorted ISA flags relevant to ggml


def parse_meminfo(text: str) -> tuple[int, int]:
    """``/proc/meminfo`` -> (total, available) bytes.

    Kernels before 3.14 lack MemAvailable; free + buffers + cached is the
    classic approximation there.
    """
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            unit = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
            values[key.strip()] = int(parts[0]) * unit
    total = values.get("MemTotal", 0)
    if "MemAvailable" in values:
        available = values["MemAvailable"]
    else:
        available = sum(values.get(k, 0) for k in ("MemFree", "Buffers", "Cached"))
    return total, min(available, total) if total else available


def parse_cpuinfo(text: str) -> tuple[str, int, tuple[str, ...]]:
    """``/proc/cpuinfo`` -> (model name, physical cores or 0 if unknown, ISA flags)."""
    model = ""
    cores: set[tuple[str, str]] = set()
    raw_flags: set[str] = set()
    arm = False
    physical_id = core_id = ""
    for line in [*text.splitlines(), ""]:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not line.strip():
            # A blank line ends one processor's block.
            if core_id:
                cores.add((physical_id, core_id))
            physical_id = core_id = ""
        elif key in ("model name", "Hardware", "Model") and not model:
            model = value
        elif key == "physical id":
            physical_id = value
        elif key == "core id":
            core_id = value
        elif key == "flags":
            raw_flags.update(value.split())
        elif key == "Features":
            arm = True
            raw_flags.update(value.split())
    if arm:
        flags = {_ARM_FLAGS[f] for f in raw_flags if f in _ARM_FLAGS}
    else:
        flags = {f for f in raw_flags if f in _X86_FLAGS or f.startswith(_X86_PREFIXES)}
        if "pni" in raw_flags:  # the kernel's name for SSE3
            flags.add("sse3")
    return model, len(cores), tuple(sorted(flags))


def _cgroup_available(root: Path) -> int | None:
    """Memory left under a cgroup v2 limit, or None when there is no limit."""
    try:
        limit = (root / "sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int((root / "sys/fs/cgroup/memory.current").read_text().strip())
        return max(int(limit) - used, 0)
    except (OSError, ValueError):
        return None


def linux_memory(root: Path = Path("/")) -> tuple[int, int]:
    """(total, available) RAM on Linux, honouring a cgroup v2 limit."""
    try:
        total, available = parse_meminfo((root / "proc/meminfo").read_text())
    except OSError:
        total, available = _sysconf_total(), 0
    try:
        limit_text = (root / "sys/fs/cgroup/memory.max").read_text().strip()
        if limit_text != "max":
            total = min(total, int(limit_text)) if total else int(limit_text)
    except (OSError, ValueError):
        pass
    capped = _cgroup_available(root)
    if capped is not None:
        available = min(available, capped)
    return total, available


def _sysconf_total() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _sysctl(name: str) -> str:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def parse_vm_stat(text: str, total: int) -> int:
    """macOS ``vm_stat`` -> available bytes (free + inactive + speculative + purgeable)."""
    page = 4096
    match = re.search(r"page size of (\d+) bytes", text)
    if match:
        page = int(match.group(1))
    pages = 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("Pages free", "Pages inactive", "Pages speculative", "Pages purgeable"):
            digits = value.strip().rstrip(".")
            if digits.isdigit():
                pages += int(digits)
    return min(pages * page, total) if total else pages * page


def _macos_info() -> CPUInfo:
    total = int(_sysctl("hw.memsize") or 0)
    try:
        vm = subprocess.run(["vm_stat"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        vm = ""
    flags = []
    for sysctl_name, flag in (
        ("hw.optional.arm.FEAT_DotProd", "dotprod"),
        ("hw.optional.arm.FEAT_I8MM", "i8mm"),
        ("hw.optional.arm.FEAT_BF16", "bf16"),
        ("hw.optional.avx2_0", "avx2"),
        ("hw.optional.avx1_0", "avx"),
    ):
        if _sysctl(sysctl_name) == "1":
            flags.append(flag)
    if platform.machine() == "arm64":
        flags.append("neon")
    logical = os.cpu_count() or 1
    return CPUInfo(
        model=_sysctl("machdep.cpu.brand_string") or platform.processor(),
        arch=platform.machine(),
        physical_cores=int(_sysctl("hw.physicalcpu") or 0) or logical,
        logical_cores=int(_sysctl("hw.logicalcpu") or 0) or logical,
        total_ram=total,
        available_ram=parse_vm_stat(vm, total) if vm else total,
        flags=tuple(sorted(set(flags))),
    )


def logical_cores() -> int:
    """CPUs this process may run on (affinity-aware where the OS says)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_info(root: Path = Path("/")) -> CPUInfo:
    """Read the host's CPU and memory facts now (``root`` lets tests use a fake /)."""
    if platform.system() == "Darwin" and root == Path("/"):
        return _macos_info()
    try:
        model, physical, flags = parse_cpuinfo((root / "proc/cpuinfo").read_text())
    except OSError:
        model, physical, flags = platform.processor(), 0, ()
    logical = logical_cores()
    total, available = linux_memory(root)
    return CPUInfo(
        model=model or platform.processor() or "unknown",
        arch=platform.machine(),
        # Affinity may hide cores (containers); never report more physical than usable.
        physical_cores=min(physical, logical) if physical else logical,
        logical_cores=logical,
        total_ram=total,
        available_ram=available,
        flags=flags,
    )


def available_ram() -> int:
    """Available system RAM right now, in bytes (what the scheduler checks before a load)."""
    if platform.system() == "Darwin":
        return _macos_info().available_ram
    return linux_memory()[1]


def default_threads() -> int:
    """Threads for CPU inference: the physical cores this process may run on.

    llama.cpp's CPU kernels gain nothing from SMT siblings, and a container may
    allow fewer CPUs than the machine has.
    """
    try:
        allowed = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no sched_getaffinity
        allowed = os.cpu_count() or 1
    try:
        physical = cpu_info().physical_cores
    except Exception:  # detection is best effort
        physical = 0
    return max(1, min(physical, allowed) if physical > 0 else allowed)
