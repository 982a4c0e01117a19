"""``localllm service install|uninstall|status``: run the daemon as a per-user service.

Linux gets a systemd user unit (``~/.config/systemd/user/localllm.service``,
``systemctl --user``); macOS a launchd agent
(``~/Library/LaunchAgents/io.localllm.serve.plist``, ``launchctl``).  Both run
``<this python> -P -m localllm serve``: the interpreter of the environment the
command runs from (pipx, Homebrew or a venv), never a ``localllm`` looked up on
PATH, which a service manager's PATH may not have.  ``LOCALLLM_*`` variables
set when installing are written into the service, so
``LOCALLLM_HOST=0.0.0.0:11434 localllm service install`` does what it says; so are
those of ``NETWORK_ENV`` (a Hub mirror, a proxy, its certificates), which pulls need.

Every external command goes through a runner that tests replace, and
``--dry-run`` prints the file and the commands without touching anything.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

UNIT_NAME = "localllm.service"
LAUNCHD_LABEL = "io.localllm.serve"

Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Service:
    """What installing means on one platform: a file and the commands around it."""

    platform: str
    path: Path
    content: str
    register: tuple[tuple[str, ...], ...]
    unregister: tuple[tuple[str, ...], ...]
    status: tuple[str, ...]


# Read by the daemon's Hub clients (httpx's trust_env), in either case.
NETWORK_ENV = (
    "HF_ENDPOINT",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)


def service_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``LOCALLLM_*`` settings and ``NETWORK_ENV`` to carry into the service, sorted
    for stable files."""
    return {
        k: environ[k]
        for k in sorted(environ)
        if k.startswith("LOCALLLM_") or k.upper() in NETWORK_ENV
    }


def _systemd_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def systemd_unit(command: list[str], env: Mapping[str, str]) -> str:
    lines = [
        "[Unit]",
        "Description=localllm daemon (local LLM server, Ollama-compatible API)",
        "After=network-online.target",
        "",
        "[Service]",
        "ExecStart=" + " ".join(_systemd_quote(part) for part in command),
        *(f"Environment={_systemd_quote(f'{k}={v}')}" for k, v in env.items()),
        # SIGTERM lets in-flight answers finish (LOCALLLM_SHUTDOWN_GRACE, 30 s by
        # default); give it that long before systemd escalates to SIGKILL.
        "KillSignal=SIGTERM",
        "TimeoutStopSec=45",
        "Restart=on-failure",
        "RestartSec=3",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


def launchd_plist(command: list[str], env: Mapping[str, str], log: Path) -> str:
    def string(value: str) -> str:
        return f"<string>{escape(value)}</string>"

    args = "".join(f"\n    {string(part)}" for part in command)
    env_items = "".join(f"\n    <key>{escape(k)}</key>{string(v)}" for k, v in env.items())
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key>{string(LAUNCHD_LABEL)}
  <key>ProgramArguments</key>
  <array>{args}
  </array>
  <key>EnvironmentVariables</key>
  <dict>{env_items}
  </dict>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><true/>
  <key>ProcessType</key><string>Interactive</string>
  <key>StandardOutPath</key>{string(str(log))}
  <key>StandardErrorPath</key>{string(str(log))}
</dict>
</plist>
"""


def plan(
    platform: str,
    home: Path,
    environ: Mapping[str, str],
    command: list[str] | None = None,
    uid: int | None = None,
) -> Service:
    """The service for ``platform`` (``linux`` or ``darwin``) in user ``home``."""
    # -P: a service starts in the home folder, where a ``localllm/`` or ``json.py``
    # would otherwise be imported ahead of the installed package.
    command = command or [sys.executable, "-P", "-m", "localllm", "serve"]
    env = service_env(environ)
    if platform.startswith("linux"):
        config = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
        ctl = ("systemctl", "--user")
        return Service(
            "linux",
            config / "systemd" / "user" / UNIT_NAME,
            systemd_unit(command, env),
            register=((*ctl, "daemon-reload"), (*ctl, "enable", "--now", UNIT_NAME)),
            unregister=((*ctl, "disable", "--now", UNIT_NAME),),
            status=(*ctl, "status", "--no-pager", UNIT_NAME),
        )
    if platform == "darwin":
        domain = f"gui/{os.getuid() if uid is None else uid}"
        path = home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
        log = home / "Library" / "Logs" / "localllm" / "serve.log"
        return Service(
            "darwin",
            path,
            launchd_plist(command, env, log),
            register=(("launchctl", "bootstrap", domain, str(path)),),
            unregister=(("launchctl", "bootout", f"{domain}/{LAUNCHD_LABEL}"),),
            status=("launchctl", "print", f"{domain}/{LAUNCHD_LABEL}"),
        )
    raise SystemExit(
        f"localllm service supports Linux (systemd) and macOS (launchd), "
        f"not {platform}; run 'localllm serve' under your own supervisor"
    )


def _real_runner(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")


def _hint(svc: Service) -> str:
    if svc.platform == "linux":
        return (
            "is there a systemd user session? (containers and SSH logins often lack one: "
            "try 'loginctl enable-linger $USER', or run 'localllm serve' yourself)"
        )
    return "see 'launchctl print gui/$(id -u)' for the agent's state"


def _run_all(
    cmds: tuple[tuple[str, ...], ...], runner: Runner, svc: Service, tolerate: bool = False
) -> bool:
    for cmd in cmds:
        done = runner(list(cmd))
        if done.returncode != 0 and not tolerate:
            print(
                f"Error: '{' '.join(cmd)}' failed ({done.returncode}): "
                f"{(done.stderr or done.stdout).strip()}\n{_hint(svc)}",
                file=sys.stderr,
            )
            return False
    return True


def install(svc: Service, runner: Runner, dry_run: bool = False) -> int:
    if dry_run:
        print(f"# would write {svc.path}\n{svc.content}")
        for cmd in svc.register:
            print("# would run: " + " ".join(cmd))
        return 0
    svc.path.parent.mkdir(parents=True, exist_ok=True)
    svc.path.write_text(svc.content)
    # An API key may be among the settings: keep the file private.
    svc.path.chmod(0o600)
    if svc.platform == "darwin":
        # launchd does not create the log folder (~/Library/Logs/localllm) itself.
        (svc.path.parents[1] / "Logs" / "localllm").mkdir(parents=True, exist_ok=True)
        # bootstrap refuses a label that is already loaded: unload a previous install first.
        _run_all(svc.unregister, runner, svc, tolerate=True)
    print(f"wrote {svc.path}")
    if not _run_all(svc.register, runner, svc):
        return 1
    print("localllm service installed and started")
    return 0


def uninstall(svc: Service, runner: Runner, dry_run: bool = False) -> int:
    if dry_run:
        for cmd in svc.unregister:
            print("# would run: " + " ".join(cmd))
        print(f"# would remove {svc.path}")
        return 0
    if not svc.path.exists():
        print(f"localllm service is not installed ({svc.path} not found)")
        return 0
    # Stopping may fail when the manager never loaded it; removing the file is what counts.
    _run_all(svc.unregister, runner, svc, tolerate=True)
    svc.path.unlink()
    if svc.platform == "linux":
        runner(["systemctl", "--user", "daemon-reload"])
    print(f"removed {svc.path}")
    return 0


def status(svc: Service, runner: Runner) -> int:
    if not svc.path.exists():
        print(f"localllm service: not installed ({svc.path} not found)")
        return 3  # what systemctl and LSB init scripts use for "not running"
    done = runner(list(svc.status))
    print(f"localllm service: installed at {svc.path}")
    out = (done.stdout or done.stderr).strip()
    if out:
        print(out)
    return 0 if done.returncode == 0 else 3


def register(sub: Any) -> None:
    p = sub.add_parser(
        "service",
        help="Install the daemon as a user service (systemd/launchd)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("action", choices=("install", "uninstall", "status"))
    p.add_argument(
        "--dry-run", action="store_true", help="print the service file and commands; change nothing"
    )
    p.add_argument("--platform", choices=("linux", "darwin"), help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, runner: Runner | None = None) -> int:
    svc = plan(args.platform or sys.platform, Path.home(), os.environ)
    runner = runner or _real_runner
    if args.action == "install":
        return install(svc, runner, args.dry_run)
    if args.action == "uninstall":
        return uninstall(svc, runner, args.dry_run)
    return status(svc, runner)
