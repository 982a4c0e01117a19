"""A jinja2 older than 3.1.6 (sandbox escapes: CVE-2024-56326, CVE-2025-27516) renders no
Jinja template: the render fails naming the version and the fix, the daemon says so
loudly at start-up.  The installed jinja2 is new enough, so the version is faked."""

from __future__ import annotations

import logging

import jinja2
import pytest

from localllm.template.chat import render_chat
from localllm.template.jinja import render_jinja
from localllm.template.jinja_version import UnsafeJinja, jinja_problem, warn_if_unsafe_jinja
from localllm.template.select import render_prompt


@pytest.fixture
def old_jinja(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jinja2, "__version__", "3.1.5")


@pytest.mark.usefixtures("old_jinja")
def test_an_old_jinja_renders_no_template_and_says_why() -> None:
    for render in (
        lambda: render_jinja("{{ 'hi' }}", {}),
        lambda: render_chat("{{ messages[0].content }}", [{"role": "user", "content": "x"}]),
    ):
        with pytest.raises(UnsafeJinja) as info:
            render()
        message = str(info.value)
        assert info.value.status == 500
        assert "jinja2 3.1.5 is installed" in message and "CVE-2025-27516" in message
        assert "pip install --upgrade 'jinja2>=3.1.6'" in message
    # Go templates and template-less models do not use jinja2.
    messages = [{"role": "user", "content": "hi"}]
    assert render_prompt("{{ range .Messages }}{{ .Content }}{{ end }}", None, messages) == "hi"
    assert render_chat(None, messages) == "hi"


@pytest.mark.usefixtures("old_jinja")
def test_the_daemon_says_so_loudly_at_start_up(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        assert warn_if_unsafe_jinja() is True
    assert "ERROR: jinja2 3.1.5 is installed" in capsys.readouterr().err
    assert any("jinja2 3.1.5" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("3.1.6", True),
        ("3.1.7", True),
        ("3.2.0", True),
        ("4.0.0", True),
        ("3.1.6.dev0", True),
        ("3.1.5", False),
        ("3.1.0", False),
        ("3.0.3", False),
        ("2.11.3", False),
        ("unknown", False),
    ],
)
def test_versions(monkeypatch: pytest.MonkeyPatch, version: str, ok: bool) -> None:
    monkeypatch.setattr(jinja2, "__version__", version)
    assert (jinja_problem() is None) is ok


def test_the_installed_jinja_is_fine(capsys: pytest.CaptureFixture[str]) -> None:
    assert jinja_problem() is None
    assert warn_if_unsafe_jinja() is False
    assert capsys.readouterr().err == ""
    assert render_jinja("{{ 'hi' }}", {}) == "hi"
