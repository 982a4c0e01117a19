"""ggml backend plugins (CUDA, Vulkan, ROCm, RPC), built or fetched, and loaded at run time.

The core (libllama, libmtmd, libggml, the CPU backend) is built by the install
from the pinned llama.cpp source (``sdist``; ``core`` says where it is installed).
Everything that needs a vendor toolkit is a plugin built from the same llama.cpp
source with ``GGML_BACKEND_DL=ON`` and kept in ``<backends>/<ggml version>/``;
runner and probe processes load it before they list devices.  ``catalog`` names
the plugins, ``toolkit`` checks what a build needs, ``source`` fetches the pinned
source, ``build`` compiles and installs, ``installed`` lists and removes.  A
built plugin travels as a pack: ``pack`` writes one (``elf`` finds and
re-points its libraries), ``install`` checks and installs one (``manifest``: its
shape, and does it fit), ``get`` fetches the one that fits from a Hugging Face
repo.  ``cuda/`` is NVIDIA's side: the compiler set from the package index, and
the runtime wheels a CUDA pack names instead of carrying.  Two leaves serve
them all: ``layout`` (where every file lives) and ``isolated`` (pip and the
build tools, run away from the user's folder).  The daemon never loads a
plugin itself.
"""
