"""The documentation stays true to the code: generated pages current, links resolving,
docstrings naming modules and names that exist."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

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
    names = sorted(
        p.name
        for p in package.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and not p.name.startswith("_"))
    )
    missing = [
        n for n in names if f"`localllm/{n}{'/' if (package / n).is_dir() else ''}`" not in text
    ]
    assert not missing, f"docs/architecture.md does not name {missing}"


# -- docstrings name what exists --------------------------------------------------------
# A rename leaves the docstrings that name the old module behind: every cross-reference
# in a docstring under localllm/ must still resolve.  Sphinx roles are imported and looked
# up (``~``, ``!``, ``Title <target>`` and names relative to the module or the class
# they are written in, as Sphinx resolves them); ``localllm.x.y`` in double backticks
# the same way; and a ``package/module.py`` path must be a file under localllm/ (or
# next to the docstring's module, or in the repository).
ROLE = re.compile(r":(mod|func|class|meth|attr|data|exc|obj):`([^`]+)`")
DOTTED = re.compile(r"``(localllm(?:\.\w+)+)``")
SOURCE_PATH = re.compile(r"``((?:\w+/)+\w+\.py)``")
PACKAGE = ROOT / "localllm"


def _docstrings(tree: ast.Module) -> Iterator[tuple[tuple[str, ...], str]]:
    """(the classes a docstring sits in, the docstring), for the module, its classes
    (nested ones too) and its functions; a class inside a function has no scope."""

    def walk(node: ast.AST, scope: tuple[str, ...] | None) -> Iterator[tuple[tuple[str, ...], str]]:
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc and scope is not None:
                yield scope, doc
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(
                    child,
                    None
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                    else (*(scope or ()), child.name),
                )
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from walk(child, scope)

    yield from walk(tree, ())


def _has(obj: Any, name: str) -> bool:
    # A dataclass field or a TypedDict key without a default is only an annotation.
    return hasattr(obj, name) or any(
        name in getattr(k, "__annotations__", {}) for k in getattr(obj, "__mro__", ())
    )


def _found(obj: Any, parts: list[str]) -> bool:
    for i, part in enumerate(parts):
        if not _has(obj, part):
            return False
        obj = getattr(obj, part, None)
        if obj is None:
            return i == len(parts) - 1
    return True


def _absolute(target: str) -> bool:
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            if i == len(parts):
                # Modules are found, not run: ``localllm._native`` would load libllama.
                if importlib.util.find_spec(name) is not None:
                    return True
                continue
            module = importlib.import_module(name)
        except ImportError:  # also a parent that is a module, not a package
            continue
        return _found(module, parts[i:])
    return False


def _resolves(role: str, target: str, module: ModuleType, scope: tuple[str, ...]) -> bool:
    if target.endswith(">") and "<" in target:
        target = target[target.rindex("<") + 1 : -1]
    target = target.strip().lstrip("~!").removesuffix("()").lstrip(".")
    if role == "mod":
        try:
            return importlib.util.find_spec(target) is not None  # found, not run
        except ImportError:  # a parent that is a module, not a package
            return False
    parts = target.split(".")
    for depth in range(len(scope), -1, -1):  # the innermost class first, the module last
        if _found(module, list(scope[:depth])):
            base: Any = module
            for name in scope[:depth]:
                base = getattr(base, name)
            if _found(base, parts):
                return True
    return _absolute(target)


def test_docstring_references_resolve() -> None:
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(ROOT)
        docs = list(_docstrings(ast.parse(text)))
        if any(ROLE.search(doc) for _, doc in docs):
            module = importlib.import_module(
                ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
            )
            broken += [
                f"{rel}: :{role}:`{target}`"
                for scope, doc in docs
                for role, target in ROLE.findall(doc)
                if not _resolves(role, target, module, scope)
            ]
        broken += [
            f"{rel}: ``{t}``" for _, doc in docs for t in DOTTED.findall(doc) if not _absolute(t)
        ]
        broken += [
            f"{rel}: ``{t}``"
            for _, doc in docs
            for t in SOURCE_PATH.findall(doc)
            if not any(
                (base / t).is_file() for base in (PACKAGE, path.parent, path.parent.parent, ROOT)
            )
        ]
    assert not broken, "docstrings name what does not exist:\n" + "\n".join(broken)
