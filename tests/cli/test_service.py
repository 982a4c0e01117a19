"""``localllm service``: the files written and the manager commands run, with a fake runner."""

from __future__ import annotations

import argparse
import plistlib
import subprocess
from pathlib import Path

import pytest

from localllm.cli import service
from localllm.cli.main import main

CMD = ["/opt/venv/bin/python", "-m", "localllm", "serve"]


class FakeRunner:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail or set()

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        bad = any(word in self.fail for word in argv)
        return subprocess.CompletedProcess(
            argv, 1 if bad else 0, "active (running)", "Failed to connect to bus" if bad else ""
        )


def test_systemd_unit_contents(tmp_path: Path) -> None:
    env = {"LOCALLLM_HOST": "0.0.0.0:11434", "LOCALLLM_API_KEY": 'k"e%y', "PATH": "/bin"}
    svc = service.plan("linux", tmp_path, env, CMD)
    assert svc.path == tmp_path / ".config/systemd/user/localllm.service"
    lines = svc.content.splitlines()
    assert 'ExecStart="/opt/venv/bin/python" "-m" "localllm" "serve"' in lines
    assert 'Environment="LOCALLLM_HOST=0.0.0.0:11434"' in lines
    # Quotes escaped, % doubled (systemd specifier syntax); PATH not carried.
    assert 'Environment="LOCALLLM_API_KEY=k\\"e%%y"' in lines
    assert not any("PATH" in line for line in lines)
    assert "WantedBy=default.target" in lines and "Restart=on-failure" in lines
    xdg = service.plan("linux", tmp_path, {"XDG_CONFIG_HOME": str(tmp_path / "x")}, CMD)
    assert xdg.path == tmp_path / "x/systemd/user/localllm.service"


def test_a_mirror_and_a_proxy_are_carried_into_the_service(tmp_path: Path) -> None:
    """Pulls run in the daemon: HF_ENDPOINT and the proxy variables must reach it."""
    env = {
        "HF_ENDPOINT": "https://hf-mirror.example",
        "HTTPS_PROXY": "http://proxy:3128",
        "no_proxy": "localhost,10.0.0.0/8",
        "SSL_CERT_FILE": "/etc/ssl/corp.pem",
        "HOME": "/home/me",
    }
    lines = service.plan("linux", tmp_path, env, CMD).content.splitlines()
    for key in ("HF_ENDPOINT", "HTTPS_PROXY", "no_proxy", "SSL_CERT_FILE"):
        assert f'Environment="{key}={env[key]}"' in lines
    assert not any("HOME=" in line for line in lines)
    plist = plistlib.loads(service.plan("darwin", tmp_path, env, CMD, uid=501).content.encode())
    assert set(plist["EnvironmentVariables"]) == set(env) - {"HOME"}


def test_launchd_plist_parses(tmp_path: Path) -> None:
    svc = service.plan("darwin", tmp_path, {"LOCALLLM_KEEP_ALIVE": "10m & <more>"}, CMD, uid=501)
    assert svc.path == tmp_path / "Library/LaunchAgents/io.localllm.serve.plist"
    plist = plistlib.loads(svc.content.encode())
    assert plist["Label"] == "io.localllm.serve"
    assert plist["ProgramArguments"] == CMD
    assert plist["EnvironmentVariables"] == {"LOCALLLM_KEEP_ALIVE": "10m & <more>"}
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] is True
    assert plist["StandardOutPath"].endswith("Library/Logs/localllm/serve.log")
    assert svc.register == (("launchctl", "bootstrap", "gui/501", str(svc.path)),)
    assert svc.status == ("launchctl", "print", "gui/501/io.localllm.serve")


def test_install_status_uninstall_linux(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svc = service.plan("linux", tmp_path, {"LOCALLLM_API_KEY": "secret"}, CMD)
    fake = FakeRunner()
    assert service.status(svc, fake) == 3 and not fake.calls
    assert service.install(svc, fake) == 0
    assert svc.path.read_text() == svc.content
    assert svc.path.stat().st_mode & 0o077 == 0  # the key is not world-readable
    assert fake.calls == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", "localllm.service"],
    ]
    fake.calls.clear()
    assert service.status(svc, fake) == 0
    assert "active (running)" in capsys.readouterr().out
    fake.calls.clear()
    assert service.uninstall(svc, fake) == 0
    assert not svc.path.exists()
    assert fake.calls[0] == ["systemctl", "--user", "disable", "--now", "localllm.service"]
    assert service.uninstall(svc, fake) == 0  # again: nothing to do, no error


def test_install_darwin_replaces_a_loaded_agent(tmp_path: Path) -> None:
    svc = service.plan("darwin", tmp_path, {}, CMD, uid=501)
    fake = FakeRunner(fail={"bootout"})  # not loaded yet: bootout fails, which is fine
    assert service.install(svc, fake) == 0
    assert [c[1] for c in fake.calls] == ["bootout", "bootstrap"]
    assert (tmp_path / "Library/Logs/localllm").is_dir()


def test_install_reports_a_missing_user_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    svc = service.plan("linux", tmp_path, {}, CMD)
    assert service.install(svc, FakeRunner(fail={"daemon-reload"})) == 1
    err = capsys.readouterr().err
    assert "Failed to connect to bus" in err and "loginctl enable-linger" in err
    assert svc.path.exists()  # the file is there for when a session exists


def test_cli_dry_run_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert main(["service", "install", "--dry-run", "--platform", "linux"]) == 0
    out = capsys.readouterr().out
    assert "ExecStart=" in out and "# would run: systemctl --user enable --now" in out
    assert not any(tmp_path.iterdir())
    assert main(["service", "uninstall", "--dry-run", "--platform", "darwin"]) == 0
    assert "launchctl bootout" in capsys.readouterr().out


def test_cli_uses_the_injected_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    fake = FakeRunner()
    args = argparse.Namespace(action="install", dry_run=False, platform="linux")
    assert service.run(args, runner=fake) == 0
    unit = (tmp_path / ".config/systemd/user/localllm.service").read_text()
    assert '-m" "localllm" "serve"' in unit and len(fake.calls) == 2


def test_unsupported_platform() -> None:
    with pytest.raises(SystemExit, match="supports Linux"):
        service.plan("win32", Path("/h"), {})


def test_the_default_command_keeps_the_working_folder_off_the_import_path(tmp_path: Path) -> None:
    # A service starts in the home folder: a localllm/ or json.py there must not win.
    import sys

    svc = service.plan("linux", tmp_path, {})
    assert f'ExecStart="{sys.executable}" "-P" "-m" "localllm" "serve"' in svc.content
