"""``localllm backends list|build|remove`` (and ``pack|install|get``): this machine's plugins.

``list`` runs the hardware probe (a child process that loads every plugin)
and shows each backend: built, loaded, its devices, or why it did not load
(a plugin others could have written is refused, with the fix), plus stray
files in the backends folder; a CUDA plugin that cannot load for want of a
driver or GPU says "no CUDA device" (``backends/cuda/runtime.py``).  ``build``
compiles one plugin from the pinned llama.cpp source with live progress (see
``backends/build.py``); a CUDA build without a toolkit asks before it downloads
NVIDIA's from the package index (``--yes`` answers for it).
``remove`` deletes a plugin.  ``pack``, ``install`` and ``get`` (prebuilt,
verified plugins) live in ``packs``; ``build`` in ``build``; the listing,
``remove`` and the proof that a plugin loads, which those verbs end with, in
``common``.  None of them needs the daemon; a running one is told when a plugin
is built, installed or removed (``tell_daemon``: SIGHUP), probes its devices
again and plans the next model load with them, with no restart.
"""

from __future__ import annotations

from typing import Any

from localllm.cli.backends import build, common, packs


def register(sub: Any) -> None:
    parser = sub.add_parser("backends", help="List, build, get or remove GPU/RPC backend plugins")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    ls = verbs.add_parser("list", help="Show every backend: built, loaded, devices")
    ls.add_argument("--json", action="store_true", help="print the list as JSON")
    ls.set_defaults(func=common.run_list)
    build.register(verbs)
    rm = verbs.add_parser("remove", help="Delete a plugin (and the libraries its pack brought)")
    rm.add_argument("name")
    rm.set_defaults(func=common.run_remove)
    packs.register(verbs)
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])
