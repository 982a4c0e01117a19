"""NVIDIA's CUDA from the package index: the compiler set for a build, the runtime for a pack.

``wheels`` pins the sets of NVIDIA's wheels a plugin is built with and chooses
one for the driver; ``unpack`` fetches wheels with pip (every sha256 pinned)
and takes files out of them safely; ``runtime`` says where a CUDA plugin finds
its runtime and why one does not load; ``runtime_wheels`` installs the runtime
libraries a pack names (cuBLAS, the CUDA runtime) once into localllm's cache
and tells the loader which files to load before the plugin.
"""
