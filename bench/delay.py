"""Delayed-delivery benchmark: delivery lag at a steady due rate, and a burst.

Usage: python bench/delay.py [--duration 60] [--rate 1000] [--burst 100000]
                             [--dir DIR] [--json out.json]

* steady: for ``--duration`` seconds a producer sends ``--rate`` messages a
  second, half with delay levels 1-3 (1 s, 5 s, 10 s) and half timers due
  0.2-3 s later, so about ``--rate`` messages fall due each second. A separate
  process runs ``DelayService.deliver_due`` (as a Celery worker or the gRPC
  endpoint would). Lag = store time of the delivered copy - due time (the
  consume-queue tag for levels, ``TIMER_OUT_MS`` for timers), in ms.
* burst: ``--burst`` timers all due within the same second; the time from that
  second's start until the last one is delivered.

Prints a table and the JSON result. Targets: lag p99 <= 100 ms, p50 <= 20 ms;
burst <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_core import Broker, Message  # noqa: E402
from broker_core.schedule import DelayService  # noqa: E402
from broker_core.validation import SCHEDULE_TOPIC  # noqa: E402

TOPIC = "BenchDelay"
QUEUES = 4


def _now() -> int:
    return int(time.time() * 1000)


def _deliverer(store_dir: str, seconds: float) -> None:
    broker = Broker.open(store_dir)
    svc = DelayService(broker)
    print("ready", flush=True)
    res = svc.deliver_due(budget_s=seconds)
    svc.close()
    broker.close()
    print(json.dumps({"delivered": res.delivered, "passes": res.passes}), flush=True)


def _start_deliverer(store_dir: Path, seconds: float) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, __file__, "--deliverer", str(store_dir), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _delivered(broker: Broker) -> int:
    return sum(broker.store.max_offset(TOPIC, q) for q in range(QUEUES))


def _lags(broker: Broker) -> dict[str, list[int]]:
    store = broker.store
    out: dict[str, list[int]] = {"level": [], "timer": [], "immediate": []}
    for q in range(QUEUES):
        off = 0
        while True:
            r = broker.pull("bench", TOPIC, q, off, 512)
            for m in r.messages:
                p = m.properties
                if "DELAY_SRC" not in p:
                    # Due before it was even sent (a slow send): stored as immediate.
                    out["immediate"].append(0)
                elif "TIMER_OUT_MS" in p:
                    out["timer"].append(m.store_timestamp - int(p["TIMER_OUT_MS"]))
                else:
                    kind, _, qoff = p["DELAY_SRC"].partition(":")
                    unit = store.get_queue_units(
                        SCHEDULE_TOPIC, int(kind[1:]) - 1, int(qoff), 1
                    )
                    out["level"].append(m.store_timestamp - unit[0][2])
            if r.next_offset == off:
                break
            off = r.next_offset
    return out


def _pct(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    s = sorted(values)

    def at(p: float) -> float:
        return float(s[min(len(s) - 1, int(p * len(s)))])

    return {
        "count": len(s),
        "p50": at(0.5),
        "p90": at(0.9),
        "p99": at(0.99),
        "max": float(s[-1]),
        "early": sum(1 for v in s if v < 0),
    }


def steady(root: Path, duration: float, rate: int) -> dict[str, Any]:
    store_dir = root / "steady"
    broker = Broker.open(store_dir)
    broker.create_topic(TOPIC, QUEUES)
    svc = DelayService(broker, install_hook=True)
    deliverer = _start_deliverer(store_dir, duration + 12)
    tick = 0.01
    per_tick = max(2, int(rate * tick))
    start = time.monotonic()
    sent = i = 0
    while time.monotonic() - start < duration:
        batch = []
        for _ in range(per_tick):
            if i % 2:
                props = {"TIMER_DELAY_MS": str(200 + (i * 7919) % 2800)}
            else:
                props = {"DELAY": str(1 + (i // 2) % 3)}
            batch.append(Message(TOPIC, b"x" * 64, properties=props))
            i += 1
        broker.send_batch(batch)
        sent += len(batch)
        nxt = start + (sent / per_tick) * tick
        time.sleep(max(0.0, nxt - time.monotonic()))
    send_s = time.monotonic() - start
    deadline = time.monotonic() + 15
    while _delivered(broker) < sent and time.monotonic() < deadline:
        time.sleep(0.1)
    deliverer.kill()
    deliverer.wait()
    lags = _lags(broker)
    svc.close()
    broker.close()
    both = lags["level"] + lags["timer"]
    return {
        "duration_s": round(send_s, 2),
        "sent": sent,
        "due_rate_per_s": round(sent / send_s, 1),
        "delivered": len(both),
        "lag_ms_all": _pct(both),
        "lag_ms_levels": _pct(lags["level"]),
        "lag_ms_timers": _pct(lags["timer"]),
    }


def burst(root: Path, n: int) -> dict[str, Any]:
    store_dir = root / "burst"
    broker = Broker.open(store_dir)
    broker.create_topic(TOPIC, QUEUES)
    svc = DelayService(broker)
    # Due at the start of a second far enough ahead for the sends to finish.
    due = (_now() // 1000 + 4 + n // 10_000) * 1000
    deliverer = _start_deliverer(store_dir, (due - _now()) / 1000 + 60)
    t0 = time.monotonic()
    for base in range(0, n, 1000):
        broker.send_batch(
            [
                Message(
                    TOPIC,
                    b"x" * 64,
                    properties={"TIMER_DELIVER_MS": str(due + (j % 1000))},
                )
                for j in range(base, min(n, base + 1000))
            ]
        )
    send_s = time.monotonic() - t0
    slack_s = (due - _now()) / 1000
    while _delivered(broker) < n and _now() < due + 60_000:
        time.sleep(0.02)
    done_wall = _now()
    deliverer.kill()
    deliverer.wait()
    all_lags = _lags(broker)
    lags = all_lags["timer"]
    svc.close()
    broker.close()
    return {
        "messages": n,
        "send_s": round(send_s, 2),
        "slack_before_due_s": round(slack_s, 2),
        "delivered": len(lags),
        "stored_immediately_because_sent_after_due": len(all_lags["immediate"]),
        "seconds_to_deliver_all": round((done_wall - due) / 1000, 3),
        "lag_ms": _pct(lags),
    }


def _table(result: dict[str, Any]) -> str:
    rows = []
    st = result.get("steady")
    if st:
        rows.append(
            f"steady: {st['sent']} msgs at {st['due_rate_per_s']}/s over "
            f"{st['duration_s']} s, delivered {st['delivered']}"
        )
        for k in ("lag_ms_all", "lag_ms_levels", "lag_ms_timers"):
            p = st[k]
            if p:
                rows.append(
                    f"  {k:<14} p50 {p['p50']:>6.0f}  p90 {p['p90']:>6.0f}  "
                    f"p99 {p['p99']:>6.0f}  max {p['max']:>6.0f}  early {p['early']}"
                )
        rows.append("  targets: p99 <= 100 ms, p50 <= 20 ms")
    b = result.get("burst")
    if b:
        rows.append(
            f"burst: {b['messages']} timers due in one second, all delivered "
            f"{b['seconds_to_deliver_all']} s after it began (target <= 10 s); "
            f"lag p50 {b['lag_ms'].get('p50')} p99 {b['lag_ms'].get('p99')} ms"
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--deliverer"]:
        _deliverer(argv[1], float(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--burst", type=int, default=100_000)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-delay-"))
    result: dict[str, Any] = {}
    try:
        if args.duration > 0:
            result["steady"] = steady(root, args.duration, args.rate)
        if args.burst > 0:
            result["burst"] = burst(root, args.burst)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(_table(result))
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
