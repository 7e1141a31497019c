"""Run logging on stderr: one readable line per event, or one JSON object per line (``--log-format
json``) with ts, level, stage, message and fields, for log shippers."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

LOGGER = logging.getLogger("failcast")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, stage, message, fields (for log shippers)."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {
                "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                "level": record.levelname.lower(),
                "stage": getattr(record, "stage", None),
                "message": record.getMessage(),
                "fields": getattr(record, "fields", {}),
            },
            default=str,
        )


class TextFormatter(logging.Formatter):
    """``16:04:21 INFO  ingest     message  key=value``; control characters from logs neutralised."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%SZ")
        fields = " ".join(f"{k}={v}" for k, v in getattr(record, "fields", {}).items())
        text = f"{ts} {record.levelname:<5} {getattr(record, 'stage', '') or '':<10} {record.getMessage()}"
        text = f"{text}  {fields}" if fields else text
        return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def setup_logging(log_format: str = "text") -> None:
    """Log to stderr (stdout stays for data); calling again replaces the handler."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    LOGGER.handlers = [handler]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def log(stage: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
    LOGGER.log(level, message, extra={"stage": stage, "fields": fields})
