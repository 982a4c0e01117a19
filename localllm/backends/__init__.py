"""ggml backend plugins (CUDA, Vulkan, ROCm, RPC) built on this machine and loaded at run time.

The core (libllama, libggml, the CPU backend) comes from the pinned
llama-cpp-python wheel.  Everything that needs a vendor toolkit is a plugin
built from the same llama.cpp source with ``GGML_BACKEND_DL=ON`` and kept in
``<backends>/<ggml version>/``; runner and probe processes load it before they
list devices.  ``catalog`` names the plugins, ``toolkit`` checks what a build
needs, ``source`` fetches the pinned source, ``build`` compiles and installs,
``installed`` lists and removes.  The daemon never loads a plugin itself.
"""
