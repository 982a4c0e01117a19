"""Only native processes (runner, probe, worker, quantize) load the engine or libllama.

The daemon, the CLI and the TUI are imported in a fresh interpreter, and
none of ``localllm.engine*`` or ``localllm._native`` may be loaded by that:
a crash in native code must never be able to take the daemon down, and
``localllm list`` must start without loading llama.cpp.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
import localllm.server.app, localllm.server.serve
import localllm.cli.main
localllm.cli.main.build_parser()   # imports every command module
import localllm.tui.app
import localllm.inference.plan, localllm.scheduler.placement, localllm.runner.process
print(json.dumps(sorted(m for m in sys.modules if m.startswith("localllm"))))
"""


def test_daemon_cli_and_tui_do_not_load_the_engine() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "localllm.server.app" in loaded and "localllm.tui.app" in loaded
    forbidden = [m for m in loaded if m.startswith(("localllm.engine", "localllm._native"))]
    assert forbidden == []
