"""Whether the CPU backend's extra buffer types compute right on this machine (LOCALLLM_CPU_REPACK).

llama.cpp keeps a repacked copy of the CPU's weights in the first extra buffer
type that takes them (AMX, CPU_REPACK; engine/cpu_buffers.py) and multiplies
with that type's own kernels.  Those kernels can be broken on a machine that
advertises the instructions: ggml-cpu built by GCC 12 with AMX enabled loads a
tile configuration whose stores the compiler dropped (its ``_tile_loadconfig``
tells it only the first 8 bytes are read), so the first prompt through AMX
dies with SIGILL at ``tileloadd`` or SIGSEGV at ``ldtilecfg``; a hypervisor
that does not keep a thread's tile state would fail the same way.  Nothing in
the CPU flags tells, so this module asks the kernels themselves.

``python -m localllm.engine.cpu_check`` is the throwaway process: for each extra
buffer type it multiplies a small weight of every type it takes, on a few
threads, for one token and for a prompt-sized batch, several rounds with pauses
between, and compares the product with the plain CPU buffer's
(``ll_cpu_extra_buft_selftest``).  It prints one JSON line per type; a kernel
that crashes kills only it, and the caller (``run_checks``) names the type it
was testing and starts another child for the rest.  When a type fails, a last
child checks that taking it out of llama.cpp's list (``ll_cpu_extra_buft_drop``)
works here and that the others still pass without it: then ``auto`` keeps the
others (CPU_REPACK) and drops only the broken one, else it turns the extra
buffers off altogether (``use_extra_bufts`` false, llama-bench's ``--repack 0``).

The verdict is a fact of this boot, this CPU and this build of ggml, so it is
cached in the cache folder under a key of those (``verdict``); the probe child
runs it first (hardware detection happens before any load), reports it with
the buffer types for the planner and ``doctor`` (``annotate``), and a runner
reads it back before its load (``prepare``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localllm.engine import cpu_buffers

# One token (a decode step: AMX's vector path) and a prompt chunk (its tile path,
# in blocks of 32 rows, so 48 leaves a partial block too).
M_SIZES = (1, 48)
# More threads than most test machines have cores, so they share cores mid-product.
THREADS = 4
ROUNDS = 3
K, ROWS = 512, 128  # a multiple of every block and row grouping a repacking kernel wants
CHILD_TIMEOUT_S = 8.0  # per child; the probe that starts them has 30 s in all
CACHE_VERSION = 1
AMX = "AMX"  # ggml's name for the AMX buffer type
# A runner's last line when it dies of a CPU fault with AMX in use (runner/lastwords.py
# picks a line that says "crashed" for the client's error).
CRASH_HINT = (
    "localllm: runner crashed (CPU fault) with llama.cpp's AMX weights in use; "
    "if AMX is the cause, set LOCALLLM_CPU_REPACK=off (or auto)"
)


@dataclass(frozen=True)
class Verdict:
    """What the self-test found: each extra buffer type's fault ("" = works), in
    llama.cpp's order, and whether the broken ones can be left out one by one."""

    faults: dict[str, str] = field(default_factory=dict)
    drop_works: bool = True
    cacheable: bool = True  # False when a child ran out of time or failed in Python

    @property
    def broken(self) -> list[str]:
        return [n for n, why in self.faults.items() if why]


@dataclass(frozen=True)
class Decision:
    """How a load uses the extra buffer types under a LOCALLLM_CPU_REPACK mode."""

    use_extra_bufts: bool
    drop: tuple[str, ...] = ()  # taken out of llama.cpp's list first
    kept: tuple[str, ...] = ()  # what the load may still use


def decide(mode: str, names: Sequence[str], verdict: Verdict | None) -> Decision:
    """``off``: none; ``on``: all; ``auto``: all but the broken ones, or none when they
    cannot be left out one by one."""
    if mode == "off":
        return Decision(False)
    if mode == "on" or verdict is None:
        return Decision(True, (), tuple(names))
    broken = [n for n in names if verdict.faults.get(n)]
    if not broken:
        return Decision(True, (), tuple(names))
    if not verdict.drop_works:
        return Decision(False)
    return Decision(True, tuple(broken), tuple(n for n in names if n not in broken))


# ---- in the throwaway child --------------------------------------------------------


def _test_buffer(i: int) -> str:
    """ "" when every weight type buffer ``i`` takes multiplies right, else what did not."""
    for t, name in enumerate(cpu_buffers.type_names()):
        for m in M_SIZES:
            rc, err = cpu_buffers.selftest(i, t, K, ROWS, m, THREADS, ROUNDS)
            if rc == -1:
                break  # a type this buffer does not take (or the test cannot make)
            if rc == 0:
                return (
                    f"self-test: its {name} product for {m} token(s) differs from the "
                    f"plain CPU's by {err:.2g} of the largest output"
                )
    return ""


def child_lines(only: Sequence[str], drop: Sequence[str]) -> Iterator[dict[str, str | int]]:
    """What the child prints: the drops it made, then each tested type's result, each
    preceded by a ``start`` line so a crash is pinned on the right type."""
    for n in drop:
        yield {"dropped": n, "rc": cpu_buffers.drop(n)}
    for i, n in enumerate(cpu_buffers.buffer_names()):
        if n in only:
            yield {"start": n}
            yield {"name": n, "fault": _test_buffer(i)}


def main(argv: list[str] | None = None) -> int:
    from localllm.children import adopt

    adopt()
    try:  # a kernel that crashes here is expected: no core file in the daemon's folder
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    parser = argparse.ArgumentParser(prog="python -m localllm.engine.cpu_check")
    parser.add_argument("--only", nargs="*", default=[], help="buffer types to test")
    parser.add_argument("--drop", nargs="*", default=[], help="buffer types to take out first")
    args = parser.parse_args(argv)
    for line in child_lines(args.only, args.drop):
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
    return 0


# ---- in the process that asks (the probe, a runner) --------------------------------


def _child(args: list[str], timeout: float) -> tuple[list[dict[str, object]], int | None]:
    """The child's JSON lines, and its exit status (None: it ran past ``timeout``)."""
    from localllm import children

    try:
        out = children.run(
            "localllm.engine.cpu_check",
            *args,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        text, rc = out.stdout, out.returncode
    except subprocess.TimeoutExpired as exc:  # run() has killed it
        text, rc = exc.stdout, None
    except OSError:  # no process at all (out of memory, too many processes): no answer
        return [], None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = []
    for raw in (text or "").splitlines():
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        if isinstance(msg, dict):
            lines.append(msg)
    return lines, rc


def run_checks(names: Sequence[str], timeout: float = CHILD_TIMEOUT_S) -> Verdict:
    """Test every type in ``names`` in throwaway children (see the module docstring)."""
    from localllm.children import describe_exit

    faults: dict[str, str] = {}
    cacheable = True
    pending = list(names)
    while pending:
        lines, rc = _child(["--only", *pending], timeout)
        testing = None
        for msg in lines:
            if "start" in msg:
                testing = str(msg["start"])
            elif "name" in msg:
                faults[str(msg["name"])] = str(msg.get("fault") or "")
                testing = None
        left = [n for n in pending if n not in faults]
        if not left:
            break
        # The child ended before it answered for every type: the one it was testing is
        # the culprit (none started: the child could not even begin, so all are).  Only
        # a kernel's death by a signal is a fact of this machine worth keeping; a child
        # that ran out of time or failed in Python says as much about the moment.
        culprits = [testing] if testing in left else left
        how = (
            "did not finish in time"
            if rc is None
            else f"crashed: {describe_exit(rc)}"
            if rc < 0
            else f"failed: {describe_exit(rc)}"
        )
        cacheable = cacheable and rc is not None and rc < 0
        for n in culprits:
            faults[n] = f"self-test {how}"
        pending = [n for n in left if n not in culprits]
    broken = [n for n in names if faults.get(n)]
    drop_works = True
    if broken:
        kept = [n for n in names if n not in broken]
        lines, rc = _child(["--drop", *broken, "--only", *kept], timeout)
        dropped = {str(m["dropped"]): m.get("rc") for m in lines if "dropped" in m}
        passed = {str(m["name"]) for m in lines if "name" in m and not m.get("fault")}
        drop_works = rc == 0 and all(dropped.get(n) == 1 for n in broken) and set(kept) <= passed
        cacheable = cacheable and rc is not None and rc <= 0
    return Verdict({n: faults.get(n, "") for n in names}, drop_works, cacheable)


def cache_key() -> str:
    """This boot, this CPU as ggml sees it, and this build of ggml and llama.cpp."""
    from localllm.engine.binding import build_info, system_info

    parts: list[Any] = [CACHE_VERSION, system_info(), build_info()]
    try:
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    except OSError:
        pass
    parts.append(_libraries())
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _libraries() -> list[tuple[str, int, int]]:
    """The ggml and llama libraries mapped into this process, by path, size and time: a
    rebuild (another compiler, other flags) is another verdict."""
    seen: dict[str, tuple[str, int, int]] = {}
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    for line in maps.splitlines():
        path = line.split(None, 5)[-1] if line.count(" ") >= 5 else ""
        name = os.path.basename(path)
        if path.startswith("/") and name.startswith(("libggml", "libllama")) and path not in seen:
            try:
                st = os.stat(path)
            except OSError:
                continue
            seen[path] = (path, st.st_size, st.st_mtime_ns)
    return sorted(seen.values())


def _cache_file(key: str) -> Path:
    from localllm import paths

    return paths.cache() / f"cpu-check-{key}.json"


def verdict(names: Sequence[str] | None = None, refresh: bool = False) -> Verdict:
    """The cached verdict for this boot and build, else a fresh one (then cached).

    ``names``: the types to answer for (default: this process's list); a cached verdict
    that covers them answers (a process that took a type out asks about fewer).
    """
    names = cpu_buffers.buffer_names() if names is None else list(names)
    if not names:
        return Verdict()
    path = _cache_file(cache_key())
    if not refresh:
        try:
            raw = json.loads(path.read_text())
            faults = raw["faults"]
            if isinstance(faults, dict) and all(isinstance(faults.get(n), str) for n in names):
                return Verdict({n: faults[n] for n in names}, bool(raw.get("drop_works", True)))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    found = run_checks(names)
    if found.cacheable:
        _save(path, found)
    return found


def _save(path: Path, v: Verdict) -> None:
    """Written whole (a temporary name, then renamed); other boots' files go."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"faults": v.faults, "drop_works": v.drop_works}))
        os.replace(tmp, path)
        for old in path.parent.glob("cpu-check-*.json"):
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        pass  # no cache folder: the next process tests again


def annotate(buffers: list[cpu_buffers.Buffer], mode: str) -> list[cpu_buffers.Buffer]:
    """The probe's ``cpu_buffers``; in ``auto`` each also says whether ``auto`` lets a load
    use it (``"auto"``) and what its self-test found (``"fault"``, "" when it works)."""
    if mode != "auto" or not buffers:
        return buffers  # on and off need no test: the planner applies them as they are
    names = [str(b.get("name")) for b in buffers]
    v = verdict(names)
    d = decide("auto", names, v)
    return [
        {**b, "auto": d.use_extra_bufts and n in d.kept, "fault": v.faults.get(n, "")}
        for b, n in zip(buffers, names, strict=True)
    ]


def prepare(mode: str) -> bool:
    """In a runner, before its loads: apply ``mode`` to this process's list of extra
    buffer types; the ``use_extra_bufts`` the loads take."""
    names = cpu_buffers.buffer_names()
    if not names:
        return True
    d = decide(mode, names, verdict(names) if mode == "auto" else None)
    for n in d.drop:
        if cpu_buffers.drop(n) < 0:
            return False  # still listed: only switching them all off keeps it unused
    if d.use_extra_bufts and AMX in d.kept:
        # AMX is the type known to crash where it is advertised (see the module
        # docstring): if it does (mode on, or a fault the self-test missed), the daemon's
        # error names the way out, since it quotes the runner's last line: this one.
        cpu_buffers.crash_hint(CRASH_HINT)
    return d.use_extra_bufts


if __name__ == "__main__":
    raise SystemExit(main())
