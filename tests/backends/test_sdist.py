"""backends.sdist: what the install's core build reads from the sdist besides its tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.backends import sdist
from tests.support.backend_build import make_tar

SHA = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


@pytest.mark.parametrize(
    ("files", "want"),
    [
        # llama-cpp-python's sdist: its git folder, with the submodule's HEAD.
        (
            {
                "p-1/.git/modules/vendor/llama.cpp/HEAD": f"{SHA}\n".encode(),
                "p-1/vendor/llama.cpp/.git": b"gitdir: ../../.git/modules/vendor/llama.cpp\n",
            },
            SHA,
        ),
        # bench/gpu_check.sh's trimmed copy: a minimal repository in the submodule.
        ({"p-1/vendor/llama.cpp/.git/HEAD": f"{SHA}\n".encode()}, SHA),
        ({"p-1/vendor/llama.cpp/CMakeLists.txt": b"x"}, ""),
        ({"p-1/.git/modules/vendor/llama.cpp/HEAD": b"ref: refs/heads/master\n"}, ""),
    ],
)
def test_the_vendored_commit_is_read_from_the_tarball(
    tmp_path: Path, files: dict[str, bytes], want: str
) -> None:
    assert sdist.llama_commit(make_tar(tmp_path / "s.tar.gz", files)) == want


def test_no_commit_from_a_file_that_is_not_a_tarball(tmp_path: Path) -> None:
    (tmp_path / "s.tar.gz").write_bytes(b"not a tarball")
    assert sdist.llama_commit(tmp_path / "s.tar.gz") == ""
    assert sdist.llama_commit(tmp_path / "missing.tar.gz") == ""


def test_the_pinned_sdist_s_file_name() -> None:
    assert sdist.filename(sdist.VERSION) == f"llama_cpp_python-{sdist.VERSION}.tar.gz"
