"""The dynamic section of a Linux shared library: what it needs, where it looks, and a rewrite.

A pack carries a plugin built on another machine, so ``pack`` must know which
libraries the plugin loads (``DT_NEEDED``) and from where (``DT_RUNPATH`` or
``DT_RPATH``, with ``$ORIGIN``), and the packed copy must not keep looking in
the builder's folders: a runpath such as ``/home/alice/.cache/...`` names a
folder that, on the machine that installs the pack, anyone called alice could
fill with a library of their choosing.  ``set_search_path`` rewrites that
string in place, the way ``chrpath`` does: the new path is no longer than the
old, the rest of the old bytes become NULs, and it refuses when any other name
in the string table shares the old string's bytes (linkers merge string
tails), so nothing else changes meaning.  64-bit little-endian ELF only (Linux
on x86-64 and arm64); anything else is refused with ``ElfError``.

``ld_cache`` reads the dynamic linker's cache, where ``pack`` and the CUDA runtime
check (cuda_runtime.py) look for a library the
plugin needs that is not beside it.
"""

from __future__ import annotations

import platform
import re
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from localllm.errors import LocalLLMError

DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 5, 10, 14, 15, 29
_PT_LOAD, _PT_DYNAMIC = 1, 2
_SHT_DYNSYM, _SHT_VERDEF, _SHT_VERNEED = 11, 0x6FFFFFFD, 0x6FFFFFFE


class ElfError(LocalLLMError):
    """Not a shared library this module can read or rewrite."""


@dataclass
class Dynamic:
    needed: list[str] = field(default_factory=list)
    soname: str = ""
    search: list[str] = field(default_factory=list)  # runpath (or rpath) entries, in order
    # (tag, offset in the file of the string, its length) of each RPATH/RUNPATH string
    search_strings: list[tuple[int, int, int]] = field(default_factory=list)
    string_refs: list[int] = field(default_factory=list)  # every other dynstr offset used
    strtab: tuple[int, int] = (0, 0)  # file offset and size of the dynamic string table


def _u(fmt: str, data: bytes, off: int) -> tuple[int, ...]:
    try:
        return struct.unpack_from("<" + fmt, data, off)
    except struct.error:
        raise ElfError("truncated ELF file") from None


def _file_offset(loads: list[tuple[int, int, int]], vaddr: int) -> int:
    for offset, start, size in loads:
        if start <= vaddr < start + size:
            return offset + vaddr - start
    raise ElfError(f"address {vaddr:#x} is in no loaded segment")


def _cstr(data: bytes, start: int, end: int) -> str:
    stop = data.find(b"\0", start, end)
    if stop < 0:
        raise ElfError("a dynamic string runs past its table")
    return data[start:stop].decode("utf-8", "replace")


def read(path: Path) -> Dynamic:
    """The dynamic section of ``path``; ``ElfError`` when it is not a 64-bit LE ELF."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise ElfError(
            f"{path.name} is not a 64-bit little-endian ELF file (packs are for "
            "Linux on x86-64 and arm64)"
        )
    phoff, shoff = _u("QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = _u("HHHH", data, 0x36)
    loads: list[tuple[int, int, int]] = []
    dyn: tuple[int, int] | None = None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = _u("IIQQQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            loads.append((p_offset, p_vaddr, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dyn = (p_offset, p_filesz)
    if dyn is None:
        raise ElfError(f"{path.name} has no dynamic section: not a shared library")
    entries: list[tuple[int, int]] = []
    for off in range(dyn[0], dyn[0] + dyn[1] - 15, 16):
        tag, val = _u("qQ", data, off)
        if tag == 0:
            break
        entries.append((tag, val))
    values = dict(entries)
    if DT_STRTAB not in values or DT_STRSZ not in values:
        raise ElfError(f"{path.name} has no dynamic string table")
    str_off, str_size = _file_offset(loads, values[DT_STRTAB]), values[DT_STRSZ]
    end = str_off + str_size
    if end > len(data):
        raise ElfError("truncated ELF file")
    out = Dynamic(strtab=(str_off, str_size))
    for tag, val in entries:
        if tag == DT_NEEDED:
            out.needed.append(_cstr(data, str_off + val, end))
            out.string_refs.append(val)
        elif tag == DT_SONAME:
            out.soname = _cstr(data, str_off + val, end)
            out.string_refs.append(val)
        elif tag in (DT_RPATH, DT_RUNPATH):
            text = _cstr(data, str_off + val, end)
            out.search_strings.append((tag, str_off + val, len(text.encode())))
    # RUNPATH wins over RPATH when both are there (and then RPATH is ignored by ld.so).
    chosen = [t for t in out.search_strings if t[0] == DT_RUNPATH] or out.search_strings
    if chosen:
        _, at, n = chosen[0]
        out.search = data[at : at + n].decode("utf-8", "replace").split(":")
    out.string_refs += _section_refs(data, shoff, shentsize, shnum)
    return out


def _section_refs(data: bytes, shoff: int, shentsize: int, shnum: int) -> list[int]:
    """dynstr offsets used by symbol names and symbol versions (read from section headers)."""
    refs: list[int] = []
    for i in range(shnum):
        _, sh_type, _, _, off, size, _, info, _, entsize = _u(
            "IIQQQQIIQQ", data, shoff + i * shentsize
        )
        if sh_type == _SHT_DYNSYM and entsize:
            refs += [_u("I", data, off + k * entsize)[0] for k in range(size // entsize)]
        elif sh_type == _SHT_VERNEED:
            at = off
            for _ in range(info):
                _, cnt, file, aux, nxt = _u("HHIII", data, at)
                refs.append(file)
                a = at + aux
                for _ in range(cnt):
                    _, _, _, name, anext = _u("IHHII", data, a)
                    refs.append(name)
                    a += anext
                at += nxt
        elif sh_type == _SHT_VERDEF:
            at = off
            for _ in range(info):
                _, _, _, cnt, _, aux, nxt = _u("HHHHIII", data, at)
                a = at + aux
                for _ in range(cnt):
                    name, anext = _u("II", data, a)
                    refs.append(name)
                    a += anext
                at += nxt
    return refs


def set_search_path(path: Path, new: str) -> None:
    """Make every RPATH/RUNPATH string of ``path`` read ``new``, in place (see the module
    docstring); ``ElfError`` when ``new`` is longer or the old string's bytes are shared."""
    info = read(path)
    encoded = new.encode()
    str_off, _ = info.strtab
    with open(path, "r+b") as fh:
        for _, at, n in info.search_strings:
            if len(encoded) > n:
                raise ElfError(
                    f"{path.name}: its library search path ({n} bytes) is shorter "
                    f"than {new!r}; it cannot be rewritten in place"
                )
            start = at - str_off
            if any(start < ref <= start + n for ref in info.string_refs):
                raise ElfError(
                    f"{path.name}: its library search path shares bytes with "
                    "other names in the string table; it cannot be rewritten"
                )
            fh.seek(at)
            fh.write(encoded + b"\0" * (n - len(encoded)))


def ld_cache() -> dict[str, str]:
    """The dynamic linker's cache (``ldconfig -p``): library name -> path, for this
    machine's architecture only (a 32-bit copy of a library must not be picked up)."""
    try:
        out = subprocess.run(
            ["/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, str] = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if m and ("x86-64" in m.group(2)) == (platform.machine() == "x86_64"):
            found.setdefault(m.group(1), m.group(3))
    return found
