"""``python -m broker_core inspect STORE_DIR`` and ``python -m broker_core bench``."""

from __future__ import annotations

import sys

from broker_core.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
