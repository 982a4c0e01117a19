"""Child process quantizing a GGUF with libllama (``python -m localllm.engine.quantize_child``).

The daemon never imports the native module, so ``create --quantize``
(``modelfile/quantize.py``) runs this instead, by module name: it sits beside
the engine, the one floor that loads libllama.  Arguments: ``IN OUT TYPE
THREADS``.  While libllama works (cffi drops the GIL during the call), a thread
reads llama.cpp's captured log and prints one JSON line per tensor,
``{"completed": i, "total": n}``, from its ``[ i/ n]`` progress lines.  Exit
status 0 on success; otherwise the error text is the last stderr line.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections import deque

_PROGRESS = re.compile(r"\[\s*(\d+)\s*/\s*(\d+)\s*\]")
# The reporter drains the log the binding would read its error text from; keep the end.
_RECENT: deque[str] = deque(maxlen=5)


def _report(stop: threading.Event) -> None:
    from localllm.engine.binding import take_log

    tail = ""
    last = -1
    while True:
        done = stop.wait(0.1)
        text = tail + take_log()
        # Keep a short tail: a "[ i/ n]" marker may be split across two log reads.
        tail = text[-64:]
        _RECENT.extend(ln.strip() for ln in text.splitlines() if ln.strip())
        for match in _PROGRESS.finditer(text):
            completed, total = int(match.group(1)), int(match.group(2))
            if completed != last and 0 < completed <= total:
                last = completed
                print(json.dumps({"completed": completed, "total": total}), flush=True)
        if done:
            return


def main(argv: list[str]) -> int:
    from localllm.children import adopt

    adopt()
    if len(argv) != 4:
        print("usage: quantize_child IN OUT TYPE THREADS", file=sys.stderr)
        return 2
    from localllm.engine.binding import native, quantize
    from localllm.errors import LocalLLMError

    in_path, out_path, ftype, threads = argv[0], argv[1], argv[2], int(argv[3])
    try:
        native()
    except LocalLLMError as exc:
        print(exc.message, file=sys.stderr)
        return 1
    stop = threading.Event()
    reporter = threading.Thread(target=_report, args=(stop,), daemon=True)
    reporter.start()
    try:
        quantize(in_path, out_path, ftype, threads)
    except LocalLLMError as exc:
        stop.set()
        reporter.join(5)
        detail = "; ".join(ln for ln in _RECENT if "error" in ln.lower() or "fail" in ln.lower())
        print(f"{exc.message} {detail}".strip(), file=sys.stderr)
        return 1
    stop.set()
    reporter.join(5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
