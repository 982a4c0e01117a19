"""A stand-in daemon for the orphan tests: start a runner, print its pid, wait to be killed.

Usage: python -m tests.support.parent_script MODEL_PATH [fake|real] [--no-wait]
(``--no-wait`` prints the parent's pid right away and starts the load in the
background, for killing the parent while the child is still loading).
"""

from __future__ import annotations

import asyncio
import os
import sys

from localllm.runner.messages import LoadOptions
from localllm.runner.process import RunnerProcess
from tests.support.runners import FAKE_ENV


async def main() -> None:
    path, kind = sys.argv[1], sys.argv[2]
    env = FAKE_ENV if kind == "fake" else None
    opts = LoadOptions(n_ctx=128, n_parallel=1, n_threads=1)
    if "--no-wait" in sys.argv:
        print(f"parent {os.getpid()}", flush=True)
    runner = await RunnerProcess.start([path], opts, load_timeout=120, env=env)
    print(f"child {runner.pid}", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main())
