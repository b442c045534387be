"""Produce/consume benchmark: this store beside Redis Streams and SQLite (WAL).

Usage: python bench/produce.py [--seconds 3] [--redis URL] [--json out.json]
(Redis: a private redis-server started for the run by default; --redis URL
measures that server as configured, changing nothing on it; --redis "" skips.)
Prints a table (with our ratio to each peer) and the JSON result.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_core.benchmark import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
