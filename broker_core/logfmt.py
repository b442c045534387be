"""One JSON object per log line, on stdout, from every process: the broker's
(``serve``, ``replicate``) and the console's (Django, gunicorn, Celery, which
name ``console.core.logging.JsonFormatter``, this class).

``LOG_FORMAT=text`` gives a broker process plain lines instead, for a person
at a terminal; ``LOG_LEVEL`` sets the level (INFO)."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime

_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON line; ``extra=`` fields become keys."""

    def format(self, record: logging.LogRecord) -> str:
        event = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                event[key] = value
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str)


def configure(level: str | None = None) -> None:
    """Log the broker process's records to stdout: JSON lines, unless
    ``LOG_FORMAT=text``."""
    handler = logging.StreamHandler(sys.stdout)
    if os.environ.get("LOG_FORMAT", "json").lower() == "text":
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
        )
    else:
        handler.setFormatter(JsonFormatter())
    logging.basicConfig(
        level=(level or os.environ.get("LOG_LEVEL", "INFO")).upper(),
        handlers=[handler],
    )


#: Periodic tasks that run every few seconds: their "received", "succeeded"
#: and "sending due task" lines were three quarters of ``make run``'s log.
TICK_TASKS = (
    "delays.deliver_due",
    "delays-deliver-due",
    "core.beat_heartbeat",
    "beat-heartbeat",
    "topics.sync",
    "topics-sync",
    "transactions.sample",
    "transactions-sample",
)


class QuietTicks(logging.Filter):
    """Drop the INFO lines Celery writes for each run of a tick task (their
    failures, at WARNING and above, stay); ``LOG_TICKS=1`` keeps them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or os.environ.get("LOG_TICKS") == "1":
            return True
        text = record.getMessage()
        return not any(t in text for t in TICK_TASKS)
