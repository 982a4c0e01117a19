"""What the tests share: helpers, stand-ins, GGUF builders and fixture plugins.

Test modules import from here, never from a ``conftest.py`` or another test module.
Fixtures that several folders use live in the plugin modules that ``tests/conftest.py``
names in ``pytest_plugins``; fixtures of one folder stay in that folder's conftest.
"""
