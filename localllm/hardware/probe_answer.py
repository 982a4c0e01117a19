"""The probe child's answer as the daemon reads it: its shape, and what a silent child means.

``engine/probe_child.py`` prints one JSON object (its fields below) as its last
line.  A child that crashed, hung or printed no answer still gets one, with the
reason in ``error`` (the signal's name, the exit status, the last lines of its
stderr), so ``detect`` always has something to build on.
"""

from __future__ import annotations

import json
import signal
from typing import TypedDict, cast

BuildInfo = dict[str, object]  # binding.build_info(): strings and flags, passed on as read


class ProbeDevice(TypedDict, total=False):
    """One device of the probe child's answer (``engine/probe_child.py``)."""

    name: str
    description: str
    type: str | int  # "cpu" | "gpu" | "igpu" | "accel", or ggml's enum value
    free: int
    total: int
    host_buffer: bool
    registry: str


class PluginReport(TypedDict, total=False):
    """What the probe child made of one plugin file."""

    file: str
    path: str
    loaded: bool
    backend: str  # the ggml registry it brought, "" when it did not load
    error: str


class ProbeAnswer(TypedDict, total=False):
    """The probe child's answer, or ``{"ok": False, "error": ...}`` when it gave none."""

    ok: bool
    error: str
    devices: list[ProbeDevice]
    plugins: list[PluginReport]
    ggml_version: str
    system_info: str
    build_info: BuildInfo
    cpu_buffers: list[object]  # parsed by cpu_buffers.parse_extra_buffers


def parse_probe_output(returncode: int, stdout: str, stderr: str) -> ProbeAnswer:
    for line in reversed(stdout.strip().splitlines()):
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict) and "ok" in answer:
            return cast(ProbeAnswer, answer)  # its fields are checked where they are read
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    if returncode < 0:
        try:
            what = f"crashed with {signal.Signals(-returncode).name}"
        except ValueError:
            what = f"crashed with signal {-returncode}"
    else:
        what = f"exited with status {returncode} without an answer"
    return {"ok": False, "error": f"native probe {what}" + (f": {tail}" if tail else "")}
