"""SIGHUP: the daemon probes its devices again, so a plugin built or installed meanwhile is used.

``localllm backends build/install/get/remove`` change what the probe child finds (the
plugins under ``LOCALLLM_BACKENDS``), but the daemon keeps its first probe's answer
for as long as it runs.  They send SIGHUP to the daemon of their pid file: only the
daemon's own user (or root) may signal it, so the call is authenticated by the
system, and no web page or other account can make the daemon probe.  The handler
only sets a flag; the server's tick starts the probe in a thread (the probe is a
child process, seconds on a GPU machine), and the next load plans with its devices.
Models already loaded keep running where they are.
"""

from __future__ import annotations

import logging
import signal
import threading

log = logging.getLogger("localllm.serve")
_asked = threading.Event()


def install() -> None:
    """Take SIGHUP (whose default would end the daemon) to mean "probe again"."""
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda _sig, _frame: _asked.set())


def poll() -> None:
    """From the server's tick: start a probe if one was asked for since the last tick."""
    if _asked.is_set():
        _asked.clear()
        threading.Thread(target=reprobe, name="reprobe", daemon=True).start()


def reprobe() -> None:
    from localllm.hardware.detect import detect
    from localllm.models.remote import forget_machine

    try:
        hw = detect(refresh=True)
    except Exception as exc:  # a report, never a reason to stop serving
        log.warning("probing the devices again failed: %s", exc)
        return
    forget_machine()  # the search's and the fit check's reused probe too
    names = ", ".join(f"{d.name} ({d.library})" for d in hw.devices)
    log.info("devices probed again (SIGHUP): %s; the next load plans with them", names)
