"""Whether the importable jinja2 may render untrusted chat templates at all.

jinja2 3.1.0 to 3.1.5 let a template escape the sandbox (CVE-2024-56326 through
``str.format``, CVE-2025-27516 through ``|attr``): running code as the daemon's user
from a GGUF file.  ``pyproject.toml`` requires 3.1.6, but a shared environment can
still import an older one, so it is checked where it matters: the daemon says so
loudly at start-up, every Jinja render refuses with ``UnsafeJinja`` (a 500 naming the
version and the fix), and ``localllm doctor`` reports it.
"""

from __future__ import annotations

import logging
import re
import sys
from functools import lru_cache

from localllm.errors import LocalLLMError

SAFE_VERSION = (3, 1, 6)
log = logging.getLogger(__name__)


class UnsafeJinja(LocalLLMError):
    """The importable jinja2 is older than 3.1.6: Jinja chat templates are not rendered."""


def jinja_version() -> str:
    """The version of the jinja2 that ``import jinja2`` finds."""
    import jinja2

    return str(getattr(jinja2, "__version__", "unknown"))


@lru_cache(maxsize=8)
def _problem(version: str) -> str | None:
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
    if len(numbers) == 3 and numbers >= SAFE_VERSION:
        return None
    return (
        f"jinja2 {version} is installed; versions before 3.1.6 let a chat template "
        "escape its sandbox (CVE-2024-56326, CVE-2025-27516), so Jinja chat templates "
        f"are refused. Fix: {sys.executable} -m pip install --upgrade 'jinja2>=3.1.6'"
    )


def jinja_problem() -> str | None:
    """Why Jinja templates are refused here (the version and the fix), or None."""
    return _problem(jinja_version())


def require_safe_jinja() -> None:
    """Raise ``UnsafeJinja`` when the importable jinja2 is too old to render templates."""
    problem = jinja_problem()
    if problem is not None:
        raise UnsafeJinja(problem)


def warn_if_unsafe_jinja() -> bool:
    """At daemon start-up: shout on stderr and in the log if templates will be refused."""
    problem = jinja_problem()
    if problem is None:
        return False
    log.error("%s", problem)
    bar = "!" * 78
    print(f"{bar}\nERROR: {problem}\n{bar}", file=sys.stderr, flush=True)
    return True
