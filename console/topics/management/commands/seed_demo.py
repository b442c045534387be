"""``manage.py seed_demo``: realistic traffic through ``broker_core`` so the
console is never empty on first look.

Topics with JSON bodies, tags, keys and properties from several producer
groups; consumer groups at different lags; a message of every delay level and
some timers. Transactions are added once ``broker_core.transaction`` exists.
Running it again adds more traffic.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from django.core.management.base import BaseCommand

from broker_core import Message
from broker_core.errors import TopicExistsError
from console.brokerlink import get_broker, get_delay_service

TOPICS = {  # name: (queues, producer group, tags)
    "orders": (8, "PID_order_service", ["created", "paid", "shipped", "cancelled"]),
    "payments": (4, "PID_payment_gateway", ["authorized", "captured", "refunded"]),
    "inventory": (4, "PID_warehouse", ["reserved", "released", "restocked"]),
    "notifications": (2, "PID_notifier", ["email", "sms", "push"]),
    "user-events": (4, "PID_web_frontend", ["login", "logout", "signup", "profile"]),
}
# group: (topic, share of each queue consumed)
CONSUMERS = {
    "CID_order_fulfilment": ("orders", 1.0),
    "CID_billing": ("payments", 0.9),
    "CID_analytics": ("user-events", 0.35),
    "CID_search_indexer": ("inventory", 0.7),
    "CID_notifier": ("notifications", 0.98),
    "CID_fraud_scoring": ("orders", 0.6),
}
REGIONS = ["eu-west", "eu-central", "us-east", "ap-south"]


def _body(topic: str, tag: str, n: int, rnd: random.Random) -> dict[str, Any]:
    return {
        "id": n,
        "event": tag,
        "topic": topic,
        "region": rnd.choice(REGIONS),
        "amount": round(rnd.uniform(1, 900), 2),
        "customer": f"C{rnd.randint(1, 5000):05d}",
        "at": int(time.time() * 1000),
    }


class Command(BaseCommand):
    help = "Send demo traffic through broker_core (topics, consumers with lag, delays)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--messages",
            type=int,
            default=4000,
            help="normal messages to send (default 4000)",
        )
        parser.add_argument("--seed", type=int, default=7)

    def handle(self, *args: Any, **opts: Any) -> None:
        rnd = random.Random(opts["seed"])
        broker = get_broker()
        for name, (queues, _pg, _tags) in TOPICS.items():
            try:
                broker.create_topic(name, queues)
            except TopicExistsError:
                pass
        sent = 0
        batch: list[Message] = []
        for n in range(opts["messages"]):
            topic = rnd.choice(list(TOPICS))
            _q, pgroup, tags = TOPICS[topic]
            tag = rnd.choice(tags)
            body = _body(topic, tag, n, rnd)
            batch.append(
                Message(
                    topic,
                    json.dumps(body).encode(),
                    tags=tag,
                    keys=[
                        f"{topic[:-1] if topic.endswith('s') else topic}-{n}",
                        body["customer"],
                    ],
                    properties={
                        "region": body["region"],
                        "amount": str(body["amount"]),
                        "producer": pgroup,
                    },
                )
            )
            if len(batch) == 200:
                sent += len(broker.send_batch(batch))
                batch = []
        if batch:
            sent += len(broker.send_batch(batch))
        # One body a careless producer filled with markup: the console shows it inert.
        broker.send(
            Message(
                "notifications",
                b'<h1>Hi</h1><script>alert("xss")</script>',
                tags="email",
                keys="html-demo",
            )
        )
        # Committed halves land in their topics: seed them before consumers commit.
        transactions = self._seed_transactions(broker, rnd)
        for group, (topic, share) in CONSUMERS.items():
            for q in range(TOPICS[topic][0]):
                hi = broker.store.max_offset(topic, q)
                broker.commit_offset(group, topic, q, int(hi * share))
        delays = get_delay_service()
        levels = len(broker.store.config.delay_levels_ms)
        scheduled = 0
        for level in range(1, levels + 1):
            for i in range(rnd.randint(1, 4)):
                delays.send_delayed(
                    Message(
                        "orders",
                        json.dumps(
                            {"reminder": f"unpaid order check L{level}", "n": i}
                        ).encode(),
                        tags="payment-reminder",
                        keys=f"reminder-{level}-{i}",
                    ),
                    level=level,
                )
                scheduled += 1
        now = int(time.time() * 1000)
        for minutes in (2, 30, 90, 60 * 30):
            delays.send_delayed(
                Message(
                    "notifications",
                    json.dumps({"campaign": f"in {minutes} min"}).encode(),
                    tags="push",
                    keys=f"campaign-{minutes}",
                ),
                deliver_at_ms=now + minutes * 60_000,
            )
            scheduled += 1
        from console.consumers.services import sync_offsets
        from console.topics.services import sync_topics

        sync_topics(force=True)
        sync_offsets(force=True)
        self.stdout.write(
            f"seeded {sent + 1} messages on {len(TOPICS)} topics, "
            f"{len(CONSUMERS)} consumer groups, {scheduled} scheduled messages, "
            f"{transactions} transactions"
        )

    def _seed_transactions(self, broker: Any, rnd: random.Random) -> int:
        """Half messages (stuck and healthy) once the transaction service exists."""
        try:
            from console.transactions.services import seed_demo_transactions
        except ImportError:
            return 0
        return seed_demo_transactions(broker, rnd)
