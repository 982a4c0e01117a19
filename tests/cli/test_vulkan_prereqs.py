"""``backends build vulkan`` checks the headers, loader, glslc and SPIRV-Headers before cmake."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from localllm.backends import vulkan_check

REPO = Path(__file__).resolve().parents[2]


def sdk(
    root: Path,
    *,
    header: int = 290,
    hpp: bool = True,
    loader: bool = True,
    glslc: bool = True,
    spirv: bool = True,
    lib: str = "lib",
) -> Path:
    """A prefix laid out as the LunarG SDK or a distribution lays it out."""
    inc = root / "include/vulkan"
    inc.mkdir(parents=True)
    (inc / "vulkan_core.h").write_text(f"#define VK_HEADER_VERSION {header}\n")
    if hpp:
        (inc / "vulkan.hpp").write_text("")
    if loader:
        (root / lib).mkdir(parents=True, exist_ok=True)
        (root / lib / "libvulkan.so").write_text("")
    if glslc:
        (root / "bin").mkdir()
        (root / "bin/glslc").write_text("#!/bin/sh\n")
        (root / "bin/glslc").chmod(0o755)
    if spirv:
        cfg = root / "share/cmake/SPIRV-Headers"
        cfg.mkdir(parents=True)
        (cfg / "SPIRV-HeadersConfig.cmake").write_text("")
    return root


def test_a_complete_prefix_passes_and_the_notes_say_where(tmp_path: Path) -> None:
    root = sdk(tmp_path / "sdk", lib="lib/x86_64-linux-gnu")
    found = vulkan_check.check({"VULKAN_SDK": str(root), "PATH": ""}, [root])
    assert found.missing == () and found.old_headers == ""
    assert found.notes == (
        f"Vulkan headers 1.3.290 ({root}/include/vulkan/vulkan_core.h)",
        f"Vulkan loader: {root}/lib/x86_64-linux-gnu/libvulkan.so",
        f"glslc: {root}/bin/glslc",
        f"SPIRV-Headers: {root}/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake",
    )


def test_each_missing_piece_is_named_with_its_debian_and_fedora_package(tmp_path: Path) -> None:
    bare = sdk(tmp_path / "a", hpp=False, loader=False, glslc=False, spirv=False)
    found = vulkan_check.check({"PATH": ""}, [bare])
    assert [n.debian for n in found.missing] == [
        "libvulkan-dev",
        "libvulkan-dev",
        "glslc",
        "spirv-headers",
    ]
    text = found.message()
    assert "sudo apt install libvulkan-dev glslc spirv-headers;" in text
    assert "sudo dnf install vulkan-headers vulkan-loader-devel glslc spirv-headers-devel;" in text
    # Only SPIRV-Headers missing (the piece older guides forget): only it is named.
    only = vulkan_check.check({"VULKAN_SDK": "x", "PATH": ""}, [sdk(tmp_path / "b", spirv=False)])
    assert [n.name for n in only.missing] == ["SPIRV-Headers"]
    assert "apt install spirv-headers;" in only.message()
    # glslc found on PATH rather than in the SDK.
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "glslc").write_text("#!/bin/sh\n")
    (tools / "glslc").chmod(0o755)
    on_path = vulkan_check.check({"PATH": str(tools)}, [sdk(tmp_path / "c", glslc=False)])
    assert on_path.missing == () and f"glslc: {tools}/glslc" in on_path.notes


def test_headers_older_than_the_pinned_source_needs_are_refused(tmp_path: Path) -> None:
    old = vulkan_check.check({"PATH": ""}, [sdk(tmp_path / "old", header=239)])
    assert "are 1.3.239" in old.message() and "needs 1.3.261 or newer" in old.message()


def test_backends_build_vulkan_stops_before_cmake(tmp_path: Path) -> None:
    """The real command, on this machine plus an SDK folder holding only the headers: what
    is missing is named and nothing is configured or compiled."""
    root = sdk(tmp_path / "sdk", loader=False, glslc=False, spirv=False)
    env = {**os.environ, "VULKAN_SDK": str(root), "LOCALLLM_HOME": str(tmp_path / "home")}
    env.pop("CMAKE_PREFIX_PATH", None)
    expected = vulkan_check.check(env)
    if not expected.missing:
        pytest.skip("this machine has every Vulkan prerequisite: the build would run")
    done = subprocess.run(
        [sys.executable, "-m", "localllm", "backends", "build", "vulkan"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode != 0
    assert expected.message() in done.stderr
    assert "apt install" in done.stderr and "dnf install" in done.stderr
    # No build folder, no build log: cmake never ran.
    assert not list((tmp_path / "home").rglob("CMakeCache.txt"))
    assert not list((tmp_path / "home").rglob("backend-build-vulkan*.log"))
