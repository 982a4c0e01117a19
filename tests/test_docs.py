"""The documentation stays true to the code: generated pages current, links resolving."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

from localllm import config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
STALE = "out of date: run `.venv/bin/python docs/generate.py` and commit the result"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_page_is_current() -> None:
    assert (DOCS / "configuration.md").read_text() == _generator().configuration(), STALE


def test_configuration_page_lists_every_setting() -> None:
    text = (DOCS / "configuration.md").read_text()
    for setting in config.REGISTRY:
        assert f"| `{setting.name}` |" in text, f"{setting.name} missing: {STALE}"


def test_cli_page_has_every_command_and_flag() -> None:
    # Compared by content, not byte for byte: argparse's layout differs between
    # Python versions, the commands and flags do not.
    from localllm.cli.main import COMMANDS, build_parser

    text = (DOCS / "cli.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in COMMANDS:
        assert f"\n## localllm {name}\n" in text, f"`localllm {name}` missing: {STALE}"
        section = text.split(f"\n## localllm {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in sub.choices[name]._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                assert flag in section, f"`localllm {name} {flag}` missing: {STALE}"


def test_relative_links_resolve() -> None:
    pages = [*DOCS.glob("*.md"), ROOT / "README.md", *(ROOT / "packaging").glob("*.md")]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_docs_index_links_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "index.md":
            assert f"({page.name})" in index, f"docs/index.md does not link {page.name}"


def test_architecture_names_every_top_level_module() -> None:
    text = (DOCS / "architecture.md").read_text()
    package = ROOT / "localllm"
    names = sorted(p.name for p in package.iterdir()
                   if (p.is_dir() and (p / "__init__.py").exists())
                   or (p.suffix == ".py" and not p.name.startswith("_")))
    missing = [n for n in names if f"`localllm/{n}{'/' if (package / n).is_dir() else ''}`"
               not in text]
    assert not missing, f"docs/architecture.md does not name {missing}"
