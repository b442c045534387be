"""The console's log format: the broker's JSON lines (``broker_core.logfmt``),
named here by Django's LOGGING and gunicorn's configuration."""

from broker_core.logfmt import JsonFormatter

__all__ = ["JsonFormatter"]
