"""SIGHUP: the daemon probes its devices again, so a plugin built or installed meanwhile is used.

``localllm backends build/install/get/remove`` change what the probe child finds (the
plugins under ``LOCALLLM_BACKENDS``), but the daemon keeps its first probe's answer
for as long as it runs.  They send SIGHUP to the daemon of their pid file: only the
daemon's own user (or root) may signal it, so the call is authenticated by the
system, and no web page or other account can make the daemon probe.  The handler
only sets a flag; the server's tick starts the probe in a thread (the probe is a
child process, seconds on a GPU machine), and the next load plans with its devices.
Models already loaded keep running where they are; each is planned again on the new
devices (``scheduler/moves.py``), and ``/api/ps`` says where a reload would put those
whose place would change.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from localllm.scheduler.scheduler import Scheduler

log = logging.getLogger("localllm.serve")
_asked = threading.Event()


def install() -> None:
    """Take SIGHUP (whose default would end the daemon) to mean "probe again"."""
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda _sig, _frame: _asked.set())


def poll(scheduler: Scheduler | None = None) -> None:
    """From the server's tick: start a probe if one was asked for since the last tick."""
    if _asked.is_set():
        _asked.clear()
        threading.Thread(target=reprobe, args=(scheduler,), name="reprobe", daemon=True).start()


def reprobe(scheduler: Scheduler | None = None) -> None:
    from localllm.hardware.detect import detect
    from localllm.models.remote import forget_machine
    from localllm.scheduler.moves import survey

    try:
        hw = detect(refresh=True)
    except Exception as exc:  # a report, never a reason to stop serving
        log.warning("probing the devices again failed: %s", exc)
        return
    forget_machine()  # the search's and the fit check's reused probe too
    for name, move in survey(scheduler.loaded() if scheduler else [], hw).items():
        where = ", ".join(f"{dev} ({n} layers)" for dev, n in move.devices.items()) or "the CPU"
        log.info("%s would move to %s on a reload (%s)", name, where, move.reason)
    names = ", ".join(f"{d.name} ({d.library})" for d in hw.devices)
    log.info("devices probed again (SIGHUP): %s; the next load plans with them", names)
