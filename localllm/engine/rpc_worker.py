"""The RPC worker (``localllm worker``): this machine's devices served to other daemons.

The server is llama.cpp's own (``ggml_backend_rpc_start_server`` from the RPC
plugin), run in this process on a thread while the main thread waits for
SIGINT/SIGTERM.  ggml RPC has no authentication, and its commands read and
write the worker's memory at addresses the client names: anyone who can reach
the port can run code as the worker's user.  So the worker binds loopback
unless ``--allow-remote`` is given, and then says so loudly.  A small state
file under the run folder lets ``localllm doctor`` see running workers (and
repeat the warning for an exposed one).

``--cache DIR`` is ggml's tensor cache (rpc-server ``-c``), shared by every
client: ggml names each cached tensor by the 64-bit FNV-1a hash of its bytes,
and a client asks for one by sending a hash.  FNV-1a is not collision
resistant, so a client can store crafted bytes under the hash of another
model's weights and every later load of that model, by any client and after
restarts, gets them.  So the folder must be this user's and writable by no one
else (a file planted there needs no collision at all; it is created 0700), and
the worker warns that its cache is only as trustworthy as every client that
can reach it (docs/multi-machine.md).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import signal
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from localllm import paths
from localllm.engine import plugins
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.hardware.cpu import default_threads

log = logging.getLogger("localllm.worker")

EXPOSED_WARNING = (
    "ggml RPC has no authentication: anyone who can reach {addr} can read "
    "and write this worker's memory, which is remote code execution as "
    "{user}, and can read or change what the devices hold. Allow only "
    "trusted hosts in a firewall, or bind 127.0.0.1 and use an SSH tunnel."
)
CACHE_WARNING = (
    "--cache: ggml keys cached tensors by a 64-bit FNV-1a hash the client "
    "sends, which is not collision resistant: any client of this worker can "
    "plant data that later loads of another model (by any client, after "
    "restarts too) will use as weights. Use it only when every client that "
    "can reach {addr} is trusted, and empty {path} when in doubt."
)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, port: int) -> str:
    """ "" when ``host:port`` can be bound now, else why not (ggml only prints a line)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host.strip("[]"), port))
    except OSError as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return ""


def choose(devs: list[Any], wanted: list[str]) -> list[Any]:
    """The devices to serve: those named, else every GPU, else the CPU."""
    if wanted:
        by_name = {d.name.lower(): d for d in devs}
        missing = [w for w in wanted if w.lower() not in by_name]
        if missing:
            raise InvalidRequest(
                f"no device {', '.join(missing)}; this machine has "
                f"{', '.join(d.name for d in devs)}"
            )
        return [by_name[w.lower()] for w in wanted]
    local = [d for d in devs if not d.registry.startswith("RPC")]
    gpus = [d for d in local if d.type in ("gpu", "igpu")]
    return gpus or [d for d in local if d.type == "cpu"][:1]


def check_cache_dir(path: str) -> tuple[Path, str]:
    """The cache folder (created 0700 if missing) and "" when it is fit, else why not:
    it must be a folder this user owns that no one else can write, or anyone on this
    machine could plant tensors in it without crafting a hash collision."""
    folder = Path(path).expanduser().absolute()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()  # the folder a symlink names is the one ggml writes into
    except OSError as exc:
        return folder, f"cannot use {folder} as the tensor cache: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return folder, f"--cache {folder} is not a folder"
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return folder, (
            f"--cache {folder} belongs to another user: its tensors could be "
            "replaced by them; use a folder of your own"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return folder, (
            f"--cache {folder} is writable by other users (mode "
            f"{stat.S_IMODE(st.st_mode):o}), who could plant tensors in it: "
            f"run 'chmod go-w {folder}' or use another folder"
        )
    return folder, ""


def state_file(port: int) -> Path:
    return paths.run_dir() / f"worker-{port}.json"


def serve(
    host: str, port: int, *, devices: list[str], cache: str | None, threads: int, allow_remote: bool
) -> int:
    """Serve ``devices`` (names; none: every GPU, else the CPU) on ``host:port`` until
    SIGINT/SIGTERM; the exit status (the process leaves with ``os._exit`` once serving)."""
    status, folder = _check_args(host, port, cache, allow_remote)
    if status:
        return status
    plugins.prepare()
    if not any(r.startswith("RPC") for r in _registries()):
        raise LocalLLMError(
            "the RPC backend plugin is not built or does not load: run "
            "'localllm backends build rpc' (about a minute), then try again"
        )
    served = choose(plugins.devices(), devices)
    endpoint = f"{host}:{port}"
    path = _announce(host, port, served, folder)
    _run(endpoint, served, folder, threads, path)


def _check_args(
    host: str, port: int, cache: str | None, allow_remote: bool
) -> tuple[int, Path | None]:
    """The exit status for arguments that cannot serve (0: they can; an error is
    printed), and the tensor cache's folder, when there is one."""
    if not is_loopback(host) and not allow_remote:
        print(
            f"Error: refusing to bind {host}: ggml RPC has no authentication, so a "
            "worker listens on loopback only unless you pass --allow-remote (see "
            "docs/multi-machine.md for firewall and SSH-tunnel setups).",
            file=sys.stderr,
        )
        return 2, None
    if not 0 < port < 65536:
        print(f"Error: port {port} out of range", file=sys.stderr)
        return 2, None
    why = check_bind(host, port)
    if why:
        print(f"Error: {why}", file=sys.stderr)
        return 1, None
    folder: Path | None = None
    if cache:
        folder, why = check_cache_dir(cache)
        if why:
            print(f"Error: {why}", file=sys.stderr)
            return 2, None
    return 0, folder


def _announce(
    host: str, port: int, served: list[plugins.NativeDevice], folder: Path | None
) -> Path:
    """Say what is served and what is risky about it; write the state file (its path)."""
    endpoint = f"{host}:{port}"
    print(f"localllm worker on {endpoint} (ggml {plugins.ggml_version()}), serving:")
    for d in served:
        print(f"  {d.name}: {d.description} ({d.total >> 20} MiB, {d.free >> 20} MiB free)")
    warnings = []
    if not is_loopback(host):
        warnings.append(EXPOSED_WARNING.format(addr=endpoint, user=_user()))
    if folder is not None:
        warnings.append(CACHE_WARNING.format(addr=endpoint, path=folder))
    for warning in warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
        log.warning(warning)
    sys.stdout.flush()
    path = state_file(port)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "endpoint": endpoint,
                "devices": [d.name for d in served],
                "exposed": not is_loopback(host),
            }
        )
    )
    return path


def _run(
    endpoint: str, served: list[plugins.NativeDevice], folder: Path | None, threads: int, path: Path
) -> NoReturn:
    """Run the RPC server in a thread until a signal or its end, then leave the process."""
    done = threading.Event()
    result: list[int] = []

    def rpc_server() -> None:
        result.append(
            plugins.serve_rpc(
                endpoint,
                [d.index for d in served],
                str(folder) if folder else None,
                threads or default_threads(),
            )
        )
        done.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    threading.Thread(target=rpc_server, name="rpc-server", daemon=True).start()
    try:
        done.wait()
    finally:
        path.unlink(missing_ok=True)
    sys.stdout.flush()
    if result:
        print(
            f"Error: the RPC server on {endpoint} stopped (code {result[0]}); see the lines above",
            file=sys.stderr,
        )
        sys.stderr.flush()
        os._exit(1)
    print("Worker stopped.")
    sys.stdout.flush()
    # The server loop lives in native code with no stop call: leaving the process is the
    # clean way out (sockets and device memory are released by the OS).
    os._exit(0)


def _user() -> str:
    try:
        import getpass

        return f"user {getpass.getuser()}"
    except (ImportError, KeyError, OSError):
        return "the user running it"


def _registries() -> list[str]:
    return [str(p.get("backend", "")) for p in plugins.load_plugins() if p.get("loaded")]
