"""Structured logs: JSON lines in containers, readable lines on a terminal."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOGGER = "autotuner"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        return f"{stamp} {record.levelname.lower():7} {record.getMessage()}"


def configure(fmt: str = "auto", level: str = "info") -> logging.Logger:
    logger = logging.getLogger(LOGGER)
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    handler.setFormatter(JsonFormatter() if use_json else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    return logger


def event(logger: logging.Logger, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """One line with structured fields (kept as JSON keys in JSON mode)."""
    logger.log(level, message, extra={"fields": fields})
