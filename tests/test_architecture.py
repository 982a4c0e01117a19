"""The house rules that the code's shape must keep, read from the source (issue 39).

* No import circle between modules, imports inside functions and under
  ``TYPE_CHECKING`` included: a circle closed only at call time is still two modules
  that cannot be understood apart, and the next import at module level turns it into
  a crash.  Nor between top-level packages (``hardware`` -> ``backends`` -> ``hardware``).
* ``dict[str, Any]`` per package may only fall: ``tests/data/any_ceilings.json`` holds
  each package's ceiling.  Lower it when a package's count falls; never raise it.
* No function over 80 lines.
* Commit subjects (since this rule began) are at most 72 characters.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "localllm"
CEILINGS = Path(__file__).with_name("data") / "any_ceilings.json"
MAX_FUNCTION_LINES = 80
MAX_SUBJECT = 72
# The last commit before the subject rule: subjects after it are checked.
SUBJECTS_SINCE = "c6bed49"


def modules() -> dict[str, Path]:
    """``localllm.x.y`` -> its file (a package is its ``__init__.py``)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The localllm modules ``name`` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            candidates = [target, *(f"{target}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        for c in candidates:
            if c in known and c != name:
                yield c


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, known)) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.append(top)
                    if top == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def top_package(name: str) -> str:
    """``localllm.store.pull`` -> ``store``; a top-level module is its own package."""
    return name.split(".")[1] if name.count(".") else name


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_modules() -> None:
    assert circles(graph()) == []


def test_no_import_circle_between_packages() -> None:
    packages: dict[str, set[str]] = defaultdict(set)
    for name, targets in graph().items():
        for target in targets:
            if top_package(name) != top_package(target):
                packages[top_package(name)].add(top_package(target))
    assert circles(packages) == []


ANY = re.compile(r"dict\[str,\s*Any\]")


def any_counts() -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for name, path in modules().items():
        counts[top_package(name)] += len(ANY.findall(path.read_text()))
    return dict(counts)


def test_untyped_dicts_only_fall() -> None:
    ceilings = json.loads(CEILINGS.read_text())
    counts = any_counts()
    over = {p: f"{n} > {ceilings.get(p, 0)}" for p, n in counts.items() if n > ceilings.get(p, 0)}
    assert not over, (
        f"dict[str, Any] above the package's ceiling in {CEILINGS.name}: {over}; type "
        "the new code (a TypedDict, or api/wire.py's JSON types for arbitrary JSON)"
    )
    assert sum(ceilings.values()) <= 200


def long_functions() -> Iterator[str]:
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    yield f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)"


def test_no_function_is_over_80_lines() -> None:
    assert list(long_functions()) == []


def test_commit_subjects_are_short() -> None:
    out = subprocess.run(
        ["git", "-C", str(REPO), "log", "--format=%h %s", f"{SUBJECTS_SINCE}..HEAD"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        pytest.skip(f"no git history back to {SUBJECTS_SINCE} here (a shallow clone or a copy)")
    long = [line for line in out.stdout.splitlines() if len(line.split(" ", 1)[1]) > MAX_SUBJECT]
    assert long == []
