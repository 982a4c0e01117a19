"""The daemon's logs: one line per event, tagged with the id of the request that caused it.

``request_id`` is a context variable set by the request middleware; every log
record made while a request is handled (routes, services, the scheduler) carries
it, so the lines of one request can be found together.  ``LOCALLLM_LOG_FORMAT``
picks plain text or JSON lines (for log shippers).  Request bodies — and so
prompts — are never logged unless ``LOCALLLM_DEBUG`` is set.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from localllm import config

request_id: ContextVar[str] = ContextVar("localllm_request_id", default="-")

# A client may pass its own id to correlate logs; anything odd is replaced, so a
# header cannot inject fake log lines or huge values.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# Attributes every LogRecord has; anything else was passed with ``extra=`` and
# belongs in the structured output.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "request_id"}


def new_request_id(client_value: str | None) -> str:
    if client_value and _CLIENT_ID.fullmatch(client_value):
        return client_value
    return uuid.uuid4().hex[:16]


class RequestIdFilter(logging.Filter):
    """Stamp each record with the current request id (``-`` outside requests)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id.get()
        return True


# Fields the access log's message already says in words; JSON keeps them as fields.
_IN_MESSAGE = frozenset({"method", "path", "status", "duration_ms"})


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = {k: v for k, v in _extras(record).items() if k not in _IN_MESSAGE}
        if extra:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in extra.items())
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {  # values of any type: json.dumps writes the odd ones as str
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "msg": record.getMessage(),
        }
        doc.update(_extras(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _text_value(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else text


def setup_logging() -> None:
    """Configure the root logger for ``localllm serve`` from the settings."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    formatter: logging.Formatter = (
        JsonFormatter() if config.LOG_FORMAT.get() == "json" else TextFormatter()
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    logging.addLevelName(config.TRACE, "TRACE")
    root.setLevel(config.log_level())
    # The runner's stderr (llama.cpp's chatter) is logged at DEBUG; the access
    # log is ours, so uvicorn's own is not needed.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
