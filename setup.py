"""Build hook for the native extension; all other metadata lives in pyproject.toml.

cffi has no pyproject-only integration yet, so ``cffi_modules`` needs this file:
it compiles native/shim.c into ``localllm._native`` (see native/build_ffi.py).
"""

from setuptools import setup

setup(cffi_modules=["native/build_ffi.py:ffibuilder"])
