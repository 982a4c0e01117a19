"""Build hook for the native extension; all other metadata lives in pyproject.toml.

cffi has no pyproject-only integration yet, so ``cffi_modules`` needs this file: it
compiles native/shim.c into ``localllm._native`` (see native/build_ffi.py).  Before
that, ``build_ext`` gets the engine's core: built from the pinned llama.cpp source on
the first install, copied from localllm's cache on later ones (native/core_build.py),
and put in the package as ``localllm/_core/`` (in the source tree for an editable
install, git-ignored), where the module's rpath finds it.  Only ``build_ext`` does
this: pip's metadata steps run this file too, and must stay quick.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def _build_ffi() -> ModuleType:
    """native/build_ffi.py by path: the build runs from pip's environment, not from here."""
    name = "_localllm_build_ffi"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "native" / "build_ffi.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class BuildWithCore(build_ext):
    """build_ext that first puts the core beside the module and points the module at it."""

    def run(self) -> None:
        ffi = _build_ffi()
        # An editable install (inplace) loads the package from the source tree.
        package = HERE / "localllm" if self.inplace else Path(self.build_lib) / "localllm"
        core = ffi.prepare_core(package)
        args = ffi.extension_args(ffi.locate(core))
        for ext in self.extensions:
            if ext.name == "localllm._native":
                for attr, value in args.items():
                    setattr(ext, attr, value)
        super().run()


# cffi wraps the build_ext given here with its own, which writes the module's C source
# and then runs this one.  The module uses only the limited API (``_native.abi3.so``), so
# the wheel says so: one wheel serves CPython 3.11 and every later version.
setup(
    cmdclass={"build_ext": BuildWithCore},
    cffi_modules=["native/build_ffi.py:ffibuilder"],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
