"""Settings for the test suite: a private var/ directory and Redis database.

The environment is set before the real settings are read, and child processes
started by tests (Celery worker and beat, the gRPC endpoint) inherit it, so no
test writes into the developer's var/ or the Redis database the system uses.
"""

import os
import tempfile

_VAR = tempfile.mkdtemp(prefix="broker-tests-")
os.environ.setdefault("VAR_DIR", _VAR)
os.environ.setdefault("BROKER_STORE_DIR", os.path.join(_VAR, "store"))
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("REPORTS_DIR", os.path.join(_VAR, "reports"))
# Pages show the health of the moment (tests change it between requests).
os.environ.setdefault("HEALTH_BANNER_TTL", "0")

from console.settings import *  # noqa: E402,F403
