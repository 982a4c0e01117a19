"""Entry point of a runner child: ``python -m localllm.runner`` (spawned by the daemon)."""

from __future__ import annotations

from localllm.runner.worker import main

main()
