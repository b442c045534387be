"""A delivering process for the crash test: ``python _deliverer.py STORE_DIR SECONDS``.

Prints "ready" once the store is open, then delivers in small batches so that
a SIGKILL lands in the middle of delivery.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from broker_core import Broker  # noqa: E402
from broker_core.schedule import DelayService  # noqa: E402
from tests.broker_core.schedule.conftest import STORE  # noqa: E402


def main() -> None:
    store_dir, seconds = sys.argv[1], float(sys.argv[2])
    broker = Broker.open(store_dir, **STORE)
    svc = DelayService(broker, batch_size=3, persist_interval_ms=20)
    print("ready", flush=True)
    svc.deliver_due(budget_s=seconds)
    svc.close()
    broker.close()


if __name__ == "__main__":
    main()
