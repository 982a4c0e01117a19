"""backends/ and cli/backends/ import one way, and the leaves stay leaves.

Read from the source: imports inside functions and under ``TYPE_CHECKING``
count, since a circle closed there is still two modules that each need the
other (issue 39 found three here).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("localllm.backends", "localllm.cli.backends")
# What everything may ask without pulling anything of backends/ in.
LEAVES = {"localllm.backends.layout", "localllm.backends.isolated", "localllm.backends.trust"}


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        base = ROOT / pkg.replace(".", "/")
        for path in base.rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts)
            out[name.removesuffix(".__init__")] = path
    return out


def imports(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports (``from pkg import mod`` included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module in known:
                out.add(node.module)
            out.update(
                f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known
            )
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    # A package's __init__ importing its own modules is how a package is put together.
    return {
        m: {d for d in imports(p, known) if d != m and not d.startswith(m + ".")}
        for m, p in mods.items()
    }


def test_no_import_circle() -> None:
    g = graph()
    done: set[str] = set()

    def walk(mod: str, trail: list[str]) -> None:
        if mod in trail:
            raise AssertionError("import circle: " + " -> ".join([*trail[trail.index(mod) :], mod]))
        if mod in done:
            return
        for dep in sorted(g.get(mod, ())):
            walk(dep, [*trail, mod])
        done.add(mod)

    for mod in sorted(g):
        walk(mod, [])


def test_the_leaves_import_nothing_of_backends() -> None:
    g = graph()
    assert all(g[leaf] == set() for leaf in LEAVES), {leaf: g[leaf] for leaf in LEAVES}


def test_the_graph_sees_the_imports_it_checks() -> None:
    g = graph()  # a reader that found nothing would pass the tests above
    assert "localllm.backends.cuda.unpack" in g["localllm.backends.cuda.wheels"]
    assert "localllm.backends.layout" in g["localllm.backends.pack"]
    assert "localllm.cli.backends.common" in g["localllm.cli.backends.packs"]
