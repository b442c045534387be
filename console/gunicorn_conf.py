"""gunicorn settings: its error and access logs as JSON lines on stdout."""

import os

bind = os.environ.get("WEB_LISTEN", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_WORKERS", "2"))
accesslog = "-"
errorlog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
graceful_timeout = 10
# gunicorn's control socket defaults to one path under the user's home, shared
# by every console on the machine (stopping one removed another's): one per
# instance, beside its other run-time files.
control_socket = os.environ.get(
    "WEB_CONTROL_SOCKET",
    os.path.join(
        os.environ.get("VAR_DIR", "var"), f"gunicorn-{bind.replace(':', '-')}.ctl"
    ),
)
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "console.core.logging.JsonFormatter"}},
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
            "formatter": "json",
        }
    },
    "root": {"handlers": ["stdout"], "level": "INFO"},
    "loggers": {
        "gunicorn.error": {"handlers": ["stdout"], "level": "INFO", "propagate": False},
        "gunicorn.access": {
            "handlers": ["stdout"],
            "level": "INFO",
            "propagate": False,
        },
    },
}
