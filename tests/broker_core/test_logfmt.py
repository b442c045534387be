"""Log lines: JSON objects, and the per-tick lines of the periodic tasks left
out unless asked for (they were three quarters of ``make run``'s log)."""

from __future__ import annotations

import json
import logging

from broker_core.logfmt import JsonFormatter, QuietTicks


def record(msg: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.makeLogRecord(
        {"name": "celery.app.trace", "levelno": level, "levelname": "INFO", "msg": msg}
    )


def test_tick_lines_are_left_out_unless_asked(monkeypatch) -> None:
    quiet = QuietTicks()
    monkeypatch.delenv("LOG_TICKS", raising=False)
    assert not quiet.filter(record("Task delays.deliver_due[ab] succeeded in 0.01s"))
    assert not quiet.filter(record("Scheduler: Sending due task beat-heartbeat"))
    assert quiet.filter(record("Task reports.run[cd] succeeded in 40s"))
    assert quiet.filter(record("Task delays.deliver_due[ab] raised", logging.ERROR))
    monkeypatch.setenv("LOG_TICKS", "1")
    assert quiet.filter(record("Task delays.deliver_due[ab] succeeded in 0.01s"))


def test_a_line_is_one_json_object() -> None:
    rec = logging.makeLogRecord(
        {"name": "broker_core.endpoint", "levelno": logging.WARNING,
         "levelname": "WARNING", "msg": "cut %d bytes", "args": (7,), "node": "a"}
    )  # fmt: skip
    line = json.loads(JsonFormatter().format(rec))
    assert line["msg"] == "cut 7 bytes" and line["level"] == "warning"
    assert line["logger"] == "broker_core.endpoint" and line["node"] == "a"
