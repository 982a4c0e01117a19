"""``localllm stop MODEL``: unload a running model now (a generate with ``keep_alive: 0``)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("stop", help="Stop a running model")
    parser.add_argument("model")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client
    from localllm.errors import ModelNotFound
    from localllm.store.names import parse_name

    wanted = parse_name(args.model).display
    with Client(autostart=True) as client:
        loaded = {str(m.get("name")) for m in client.ps()}
        # As Ollama: stopping a model that is not running is an error, not a silent success.
        if wanted not in loaded:
            raise ModelNotFound(f'couldn\'t find model "{args.model}" to stop')
        client.unload(args.model)
    return 0
