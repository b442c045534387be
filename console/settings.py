"""Django settings for the operations console.

Every setting an operator may change comes from the environment (see the
configuration table in the README); the defaults run a single machine with its
data under ``var/``.
"""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from pathlib import Path

import environ
from celery.schedules import crontab
from csp.constants import NONCE, NONE, SELF
from kombu import Queue

from console.core.secretfile import shared_secret

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(environ.Env().str("VAR_DIR", default=str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["127.0.0.1", "localhost", "[::1]", "testserver"]),
)


def _secret_key() -> str:
    """Return SECRET_KEY from the environment, else one generated once into var/."""
    value = env.str("SECRET_KEY", default="")
    if value:
        return value
    return shared_secret(VAR_DIR / "secret_key")


SECRET_KEY = _secret_key()
DEBUG = env("DEBUG")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# --- Transport security: HTTPS=true when the console is served over TLS ------
# (directly or behind a proxy that sets X-Forwarded-Proto): Secure cookies, HSTS
# and a redirect of plain HTTP, so `manage.py check --deploy` is clean.
HTTPS = env.bool("HTTPS", default=False)
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = env.int("HSTS_SECONDS", default=31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
if env.bool("BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# /healthz answers plain HTTP on the loopback for supervisors and load balancers.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# --- Content-Security-Policy (django-csp): the console's pages load only their
# own scripts and styles (no inline script anywhere, static/console.js instead);
# the API docs page's one inline style carries the request's nonce.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, NONCE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

INSTALLED_APPS = [
    "console.audit.admin_apps.AuditedAdminConfig",  # django.contrib.admin, audited
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "django_celery_beat",
    "console.core",
    "axes",
    "console.ui",
    "console.accounts",
    "console.audit",
    "console.topics",
    "console.messages",
    "console.consumers",
    "console.delays",
    "console.transactions",
    "console.reports",
    "console.overview",
    "console.cluster",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "console.ui.middleware.RequestIdMiddleware",
    "console.ui.middleware.UserTimeZoneMiddleware",
    # Every page needs a signed-in user; /login/ and /healthz opt out.
    "console.ui.middleware.ConsoleLoginRequiredMiddleware",
    # On a cluster: the node the single-store pages show (console/cluster/picker.py).
    "console.cluster.picker.NodeChoiceMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: answers a locked-out login with 429 (django-axes).
    "axes.middleware.AxesMiddleware",
]

# --- Login throttling (django-axes): after LOGIN_FAILURE_LIMIT wrong passwords
# for one user name from one address, logins are refused for
# LOGIN_COOLOFF_MINUTES, even with the right password; every lock-out is audited.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = env.int("LOGIN_COOLOFF_MINUTES", default=15) / 60  # hours
# A user name with the client's address; a bad API token's fingerprint alone
# (console/core/authentication.py: never an address alone, so one client cannot
# lock out the others sharing its address).
AXES_LOCKOUT_PARAMETERS = "console.core.authentication.lockout_parameters"
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
AXES_LOCKOUT_CALLABLE = "console.core.authentication.lockout_response"
AXES_CLIENT_IP_CALLABLE = "console.core.client_address.client_ip"
# Bad API tokens per client address and minute (per console process) before
# further bad ones are answered 429; a valid token is never refused by it.
API_BAD_TOKEN_RATE = env.str("API_BAD_TOKEN_RATE", default="30/min")

# --- Client address behind a reverse proxy (console/core/client_address.py) ---
# Empty: REMOTE_ADDR. Else the request.META name (or header name) of the header
# the proxy appends the client's address to, e.g. HTTP_X_FORWARDED_FOR; the
# client is the TRUSTED_PROXY_COUNT-th entry from the right or, with
# TRUSTED_PROXIES (addresses or networks), the right-most entry that is not a
# proxy, and only when REMOTE_ADDR is one of them. Lock-outs, the bad-token
# rate and audit records use that address; never set it without a proxy that
# writes the header, or clients choose their own address.
TRUSTED_PROXY_HEADER = env.str("TRUSTED_PROXY_HEADER", default="")
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=1)
TRUSTED_PROXIES = [
    str(ipaddress.ip_network(p, strict=False))
    for p in env.list("TRUSTED_PROXIES", default=[])
]
if TRUSTED_PROXY_COUNT < 1:
    raise ValueError("TRUSTED_PROXY_COUNT must be 1 or more")

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.ui.context_processors.roles",
                "console.ui.context_processors.navigation",
                "console.core.alerts.alerts",
                "console.cluster.context.store_scope",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url(
        "DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'console.sqlite3'}"
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web server, the worker and beat read while one writes.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].update(
        {
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the app and project static folders: no collectstatic step.
WHITENOISE_USE_FINDERS = True

# --- The broker -------------------------------------------------------------
BROKER_STORE_DIR = Path(env.str("BROKER_STORE_DIR", default=str(VAR_DIR / "store")))
BROKER_FLUSH = env.str("BROKER_FLUSH", default="async")
# Extra ``Broker.open`` settings of the console's processes: appends are refused
# while the store's disk is fuller than BROKER_DISK_RATIO (RocketMQ's 0.90); a
# message due more than BROKER_MAX_DELAY_S ahead is refused (RocketMQ 5's
# timerMaxDelaySec, 3 days; the endpoint's ``serve --max-delay-s``).
BROKER_STORE_OPTIONS = {
    "disk_space_warning_ratio": env.float("BROKER_DISK_RATIO", default=0.90),
    "timer_max_delay_s": env.int("BROKER_MAX_DELAY_S", default=259_200),
}
GRPC_LISTEN = env.str("GRPC_LISTEN", default="127.0.0.1:8081")
# The node whose store the console's pages manage, through its admin API
# (``serve --admin-listen``; its token in CLUSTER_ADMIN_TOKEN_FILE). Empty: the
# console opens BROKER_STORE_DIR itself (development and tests).
BROKER_ADMIN_URL = env.str("BROKER_ADMIN_URL", default="")
# Live lists (pending and discarded halves, consumer groups, scheduled messages)
# fetch themselves again this often (seconds); each has a pause button.
LIVE_REFRESH_SECONDS = env.float("LIVE_REFRESH_SECONDS", default=15.0)
# The health banner on every page is recomputed at most this often (seconds).
HEALTH_BANNER_TTL = env.float("HEALTH_BANNER_TTL", default=5.0)
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
# A cluster of nodes (docs/cluster.md): its name, the route registry's Redis and
# the file holding the nodes' admin API token. Empty BROKER_CLUSTER: one node.
BROKER_CLUSTER = env.str("BROKER_CLUSTER", default="")
REGISTRY_URL = env.str("REGISTRY_URL", default="")
CLUSTER_ADMIN_TOKEN_FILE = env.str("CLUSTER_ADMIN_TOKEN_FILE", default="")
# One admin API read's timeout (the Cluster page asks every node at once and
# waits at most this plus a second for all of them) and one write's.
CLUSTER_ADMIN_TIMEOUT_S = env.float("CLUSTER_ADMIN_TIMEOUT_S", default=5.0)
CLUSTER_ADMIN_WRITE_TIMEOUT_S = env.float("CLUSTER_ADMIN_WRITE_TIMEOUT_S", default=30.0)
# The hosts (names, addresses or networks) the admin token may be sent to;
# empty: whatever admin URL a node registers.
CLUSTER_ADMIN_HOSTS = env.list("CLUSTER_ADMIN_HOSTS", default=[])
# The health banner warns of a slave this many bytes behind its master.
CLUSTER_LAG_WARN_BYTES = env.int("CLUSTER_LAG_WARN_BYTES", default=64 << 20)
# Celery per node (console/core/nodes.py): the nodes beat schedules the timers
# for, each on queue node.<name>; and the node this process's store belongs to
# (BROKER_ADMIN_URL's node for the web process): audit ids of its store are
# <BROKER_NODE>/<object>, "local/<object>" when it is empty.
CLUSTER_NODES = env.list("CLUSTER_NODES", default=[])
BROKER_NODE = env.str("BROKER_NODE", default="")
SPARK_MASTER = env.str("SPARK_MASTER", default="local[*]")
REPORTS_DIR = Path(env.str("REPORTS_DIR", default=str(VAR_DIR / "reports")))
# Where the reports' Parquet export of the log and the runs' results live: a
# directory or a URI (s3://bucket/prefix?endpoint_override=host:port&scheme=http
# for an S3-compatible store, credentials from AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY; hdfs://...). Empty: under REPORTS_DIR. With an object
# store, a Spark cluster needs no disk shared with this host (docs/reports.md).
REPORTS_EXPORT_URI = env.str("REPORTS_EXPORT_URI", default="")
REPORTS_RESULTS_URI = env.str("REPORTS_RESULTS_URI", default="")
TRANSACTION_CHECK_INTERVAL = env.float("TRANSACTION_CHECK_INTERVAL", default=60.0)
DELAY_TICK_INTERVAL = env.float("DELAY_TICK_INTERVAL", default=1.0)
BEAT_HEARTBEAT_INTERVAL = env.float("BEAT_HEARTBEAT_INTERVAL", default=10.0)
TOPICS_SYNC_INTERVAL = env.float("TOPICS_SYNC_INTERVAL", default=30.0)
# How often the reports' Parquet export catches up with the log (0: never; the
# report runs then decode what is new themselves).
REPORTS_EXPORT_INTERVAL = env.float("REPORTS_EXPORT_INTERVAL", default=600.0)
# On a cluster (BROKER_NODE, CLUSTER_NODES or BROKER_CLUSTER set) each node
# exports under REPORTS_EXPORT_URI/<node>/; a run fails on a node whose export
# was last brought up to date longer than this (seconds) before the end of the
# run's window. Default: three export intervals (30 minutes without them).
REPORTS_EXPORT_MAX_AGE = env.float(
    "REPORTS_EXPORT_MAX_AGE", default=3 * REPORTS_EXPORT_INTERVAL or 1800.0
)
# A report run past this many seconds is stopped and marked FAILED; the reaper
# (every REPORTS_REAP_INTERVAL s) fails runs whose worker process died.
REPORTS_TIME_LIMIT = env.int("REPORTS_TIME_LIMIT", default=3600)
REPORTS_REAP_INTERVAL = env.float("REPORTS_REAP_INTERVAL", default=60.0)
# A failed report run (an error, bad input, the time limit, a killed worker) is
# announced: an e-mail to REPORTS_ALERT_EMAILS (through Django's e-mail
# settings: EMAIL_URL, default the console backend that logs it) and a JSON
# POST to REPORTS_ALERT_WEBHOOK. Empty: no alert of that kind.
REPORTS_ALERT_EMAILS = env.list("REPORTS_ALERT_EMAILS", default=[])
REPORTS_ALERT_WEBHOOK = env.str("REPORTS_ALERT_WEBHOOK", default="")
vars().update(env.email_url("EMAIL_URL", default="consolemail://"))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="broker-console@localhost")
# TransactionConfig fields for the check. A half is checked at most once per
# check_interval_ms; keep it a little under beat's interval so a half due at
# one run is not missed by milliseconds and left for the next.
TRANSACTION_OPTIONS = {
    "transaction_timeout_ms": env.int("TRANSACTION_TIMEOUT_MS", default=6000),
    "check_max": env.int("TRANSACTION_CHECK_MAX", default=15),
    "check_interval_ms": int(TRANSACTION_CHECK_INTERVAL * 1000 * 0.9),
    "rollback_on_max_checks": env.bool("TRANSACTION_ROLLBACK_ON_MAX", default=False),
}
# Check-back transports the Celery check loads: the gRPC endpoint's Redis relay
# reaches producers connected to the endpoint (RecoverOrphanedTransactionCommand).
TRANSACTION_TRANSPORT_MODULES = env.list(
    "TRANSACTION_TRANSPORT_MODULES", default=["broker_core.endpoint.relay"]
)

# --- Celery -----------------------------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default=REDIS_URL)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# django-celery-beat's DatabaseScheduler, which also says it is alive
# (console/core/liveness.py: /healthz tells beat from the worker).
CELERY_BEAT_SCHEDULER = "console.core.liveness:BeatScheduler"
# Isolation: Spark reports run on their own queue and worker ("reports" in the
# Procfile, one at a time); the transaction check, delay delivery and the beat
# heartbeat have the "timers" queue to themselves, so no report can starve
# them. Everything else goes to the default queue, served with the timers.
CELERY_TASK_DEFAULT_QUEUE = "celery"
# A worker started without -Q serves all three (one worker still runs
# everything, as before, but then a report can hold a slot a timer needs).
CELERY_TASK_QUEUES = (Queue("timers"), Queue("celery"), Queue("reports"))
CELERY_TASK_ROUTES = {
    "reports.reap": {"queue": "timers"},
    "reports.*": {"queue": "reports"},
    "transactions.run_check": {"queue": "timers"},
    "transactions.sample": {"queue": "timers"},
    "delays.deliver_due": {"queue": "timers"},
    "core.beat_heartbeat": {"queue": "timers"},
}
# A worker takes one task at a time (no hoarding while another slot is free).
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE = {
    # Heartbeat: proves beat is alive; /healthz reads the time it last ran.
    "beat-heartbeat": {
        "task": "core.beat_heartbeat",
        "schedule": timedelta(seconds=BEAT_HEARTBEAT_INTERVAL),
        "options": {"expire_seconds": BEAT_HEARTBEAT_INTERVAL},
    },
    # Delayed delivery: each run delivers for one tick window with sub-second
    # precision; a stale tick is dropped rather than run late.
    "delays-deliver-due": {
        "task": "delays.deliver_due",
        "schedule": timedelta(seconds=DELAY_TICK_INTERVAL),
        "options": {"expire_seconds": DELAY_TICK_INTERVAL},
    },
    # Transaction check: checks back half messages left pending, discards those
    # checked too often; a run missed by more than one interval is dropped.
    "transactions-run-check": {
        "task": "transactions.run_check",
        "schedule": timedelta(seconds=TRANSACTION_CHECK_INTERVAL),
        "options": {"expire_seconds": TRANSACTION_CHECK_INTERVAL},
    },
    # Transaction counters for the overview's per-minute charts (every 10 s;
    # a sample is stored when the last is 10 s old or of an earlier minute),
    # and at the start of every minute, whose sample bounds the minutes.
    "transactions-sample": {
        "task": "transactions.sample",
        "schedule": timedelta(seconds=10),
        "options": {"expire_seconds": 10},
    },
    "transactions-sample-minute": {
        "task": "transactions.sample",
        "schedule": crontab(minute="*"),
        "options": {"expire_seconds": 10},
    },
    # Console tables of topics, depths and consumer offsets, copied from the
    # store so pages and the API can filter and sort them.
    "topics-sync": {
        "task": "topics.sync",
        "schedule": timedelta(seconds=TOPICS_SYNC_INTERVAL),
        "options": {"expire_seconds": TOPICS_SYNC_INTERVAL},
    },
}
CELERY_BEAT_SCHEDULE["reports-reap"] = {
    "task": "reports.reap",
    "schedule": timedelta(seconds=REPORTS_REAP_INTERVAL),
    "options": {"expire_seconds": REPORTS_REAP_INTERVAL},
}
if CLUSTER_NODES:
    # One check and one delay tick per node, on that node's queue: a slow node
    # never delays another (its worker: BROKER_NODE=<name>, -Q node.<name>).
    CELERY_TASK_QUEUES += tuple(Queue(f"node.{n}") for n in CLUSTER_NODES)
    for _task, _key, _every in (
        ("delays.deliver_due", "delays-deliver-due", DELAY_TICK_INTERVAL),
        (
            "transactions.run_check",
            "transactions-run-check",
            TRANSACTION_CHECK_INTERVAL,
        ),
    ):
        del CELERY_BEAT_SCHEDULE[_key]
        for _node in CLUSTER_NODES:
            CELERY_BEAT_SCHEDULE[f"{_key}-{_node}"] = {
                "task": _task,
                "schedule": timedelta(seconds=_every),
                "kwargs": {"node": _node},
                "options": {"expire_seconds": _every, "queue": f"node.{_node}"},
            }
if REPORTS_EXPORT_INTERVAL > 0:
    # Reports read an incremental Parquet export of the log; keeping it current
    # here means a scheduled report decodes only the last interval's records.
    CELERY_BEAT_SCHEDULE["reports-export"] = {
        "task": "reports.export",
        "schedule": timedelta(seconds=REPORTS_EXPORT_INTERVAL),
        "options": {"expire_seconds": REPORTS_EXPORT_INTERVAL},
    }
    if CLUSTER_NODES:
        # Each node exports its own log under REPORTS_EXPORT_URI/<node>/, on its
        # worker (the only one that sees its store).
        del CELERY_BEAT_SCHEDULE["reports-export"]
        for _node in CLUSTER_NODES:
            CELERY_BEAT_SCHEDULE[f"reports-export-{_node}"] = {
                "task": "reports.export",
                "schedule": timedelta(seconds=REPORTS_EXPORT_INTERVAL),
                "kwargs": {"node": _node},
                "options": {
                    "expire_seconds": REPORTS_EXPORT_INTERVAL,
                    "queue": f"node.{_node}",
                },
            }

# --- REST framework ---------------------------------------------------------
REST_FRAMEWORK = {
    # Token first: a missing or bad token answers 401 with
    # `WWW-Authenticate: Token` (DRF asks the first class for the header). Bad
    # tokens are locked out per token and rate limited per address
    # (console/core/authentication.py).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "console.core.authentication.LockoutTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "console.core.paging.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "console.core.api.exception_handler",
    # Each signed-in user's request rate (per console process).
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": env.str("API_RATE", default="3000/min")},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Broker console API",
    "DESCRIPTION": "Operate the transactional message broker.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI from the installed sidecar package: works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Logging: one structured line per event on stdout -------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "console.core.logging.JsonFormatter"}},
    "filters": {"quiet_ticks": {"()": "broker_core.logfmt.QuietTicks"}},
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
            "formatter": "json",
            "filters": ["quiet_ticks"],
        }
    },
    "root": {"handlers": ["stdout"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
