"""Transaction operations: list and read halves from broker_core's
pending-transaction index; commit (admin), roll back, resume and bulk roll back
(operator), each audited per half."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings

from broker_core.errors import BrokerError
from broker_core.transaction import (
    EndTransactionResult,
    HalfDetail,
    HalfInfo,
    HalfPage,
    TransactionState,
)
from console.audit.services import audited
from console.brokerlink import get_transaction_service, node_ops
from console.ui.roles import ADMIN, OPERATOR

#: The most halves one bulk rollback touches; the operator repeats for more.
BULK_MAX = 1000
SORTS = (
    "born",
    "-born",
    "checks",
    "-checks",
    "last_check",
    "-last_check",
    "next_check",
    "-next_check",
)


def stuck_thresholds() -> tuple[float, int]:
    """Return (age in seconds, check count) beyond which a pending half is stuck."""
    return (
        float(getattr(settings, "TRANSACTION_STUCK_AGE_S", 600)),
        int(getattr(settings, "TRANSACTION_STUCK_CHECKS", 5)),
    )


def is_stuck(info: HalfInfo, now_ms: int | None = None) -> bool:
    age_s, checks = stuck_thresholds()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return info.state == TransactionState.PENDING and (
        now - info.born_timestamp >= age_s * 1000 or info.check_count >= checks
    )


def list_transactions(
    *,
    state: str | None = "PENDING",
    producer_group: str = "",
    topic: str = "",
    key: str = "",
    min_age_s: float | None = None,
    min_checks: int | None = None,
    sort: str = "born",
    page: int = 1,
    page_size: int = 50,
) -> HalfPage:
    """Return one page of halves matching the filters (the index answers in SQL)."""
    return node_ops().list_halves(
        state=state or None,
        producer_group=producer_group or None,
        topic=topic or None,
        key=key or None,
        min_age_s=min_age_s,
        min_checks=min_checks,
        sort=sort if sort in SORTS else "born",
        page=page,
        page_size=page_size,
    )


def get_transaction(transaction_id: str) -> HalfDetail:
    """Return a half with properties, body and check history.

    Raises ``UnknownTransactionError``."""
    return node_ops().get_half(transaction_id)


def _info_dict(info: HalfInfo) -> dict[str, Any]:
    return {
        "state": info.state.value,
        "check_count": info.check_count,
        "producer_group": info.producer_group,
        "topic": info.topic,
    }


def _result_dict(r: EndTransactionResult) -> dict[str, Any]:
    return {
        "status": r.status.value,
        "state": r.state.value,
        "source": r.source.value if r.source else None,
        "operator": r.operator,
        "commit_offset_msg_id": r.commit_offset_msg_id,
    }


def _before(transaction_id: str) -> dict[str, Any] | None:
    try:
        return _info_dict(get_transaction(transaction_id).info)
    except BrokerError:
        return None


@dataclass(frozen=True, slots=True)
class Verb:
    """One operator action on a half, the same on the pages and the API.

    ``role`` is the least role allowed; ``run(ops, id, operator)`` does it
    (``ops``: the node's ``NodeOps``);
    ``after`` turns its result into the audit record's "after"."""

    name: str
    role: str
    done: str  # "Committed", for the page's message
    run: Callable[[Any, str, str], Any]
    after: Callable[[Any], dict[str, Any]]
    #: commit makes the operator type this word: a wrong commit cannot be undone.
    confirm_word: str | None = None
    reason_required: bool = True

    @property
    def action(self) -> str:
        return f"transaction.{self.name}"


VERBS: dict[str, Verb] = {
    v.name: v
    for v in (
        # Commit (admin): the message reaches consumers. A half rolled back
        # meanwhile raises ``TransactionConflictError``.
        Verb(
            "commit",
            ADMIN,
            "Committed",
            lambda svc, tid, who: svc.commit(tid, operator=who),
            _result_dict,
            confirm_word="COMMIT",
        ),
        # Roll back (operator): the message is never delivered. A second
        # rollback is ALREADY_RESOLVED, not an error; a committed half raises
        # ``TransactionConflictError``.
        Verb(
            "rollback",
            OPERATOR,
            "Rolled back",
            lambda svc, tid, who: svc.rollback(tid, operator=who),
            _result_dict,
        ),
        # Resume (operator): a discarded half is checked again.
        Verb(
            "resume",
            OPERATOR,
            "Resumed",
            lambda svc, tid, who: svc.resume(tid, operator=who),
            lambda state: {"state": state.value},
            reason_required=False,
        ),
    )
}


def perform(
    verb: str | Verb,
    *,
    actor: Any,
    transaction_id: str,
    reason: str = "",
    request: Any = None,
) -> Any:
    """Do ``verb`` on one half as ``actor``, audited (before and after).

    The caller has checked ``actor``'s role against ``verb.role``."""
    v = VERBS[verb] if isinstance(verb, str) else verb
    # The node is looked up (and may be away) within the audited action.
    return audited(
        lambda: v.run(node_ops(), transaction_id, actor.get_username()),
        actor=actor,
        request=request,
        action=v.action,
        object_type="transaction",
        object_id=transaction_id,
        reason=reason,
        before=lambda: _before(transaction_id),
        after=v.after,
        note=_no_change,
    )


def _no_change(result: Any) -> str:
    """The audit note of an end that changed nothing (already resolved)."""
    status = getattr(result, "status", None)
    if getattr(status, "value", None) != "ALREADY_RESOLVED":
        return ""
    by = result.operator or (result.source.value if result.source else "?")
    return f"no change: already {result.state.value.lower()} (by {by})"


@dataclass(slots=True)
class BulkResult:
    rolled_back: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def bulk_rollback(
    *, actor: Any, transaction_ids: list[str], reason: str, request: Any = None
) -> BulkResult:
    """Roll back each listed half (at most ``BULK_MAX``); one audit record each."""
    from broker_core.transaction import EndTransactionStatus

    out = BulkResult()
    for tid in transaction_ids[:BULK_MAX]:
        try:
            r = perform(
                "rollback",
                actor=actor,
                transaction_id=tid,
                reason=reason,
                request=request,
            )
        except BrokerError as exc:
            out.failed[tid] = str(exc)
        else:
            (
                out.rolled_back
                if r.status == EndTransactionStatus.RESOLVED
                else out.already
            ).append(tid)
    return out


def matching_ids(limit: int = BULK_MAX, **filters: Any) -> list[str]:
    """Return the ids of up to ``limit`` halves matching list filters."""
    ids: list[str] = []
    page = 1
    while len(ids) < limit:
        res = list_transactions(page=page, page_size=min(500, limit), **filters)
        ids.extend(i.transaction_id for i in res.items)
        if len(res.items) < res.page_size:
            break
        page += 1
    return ids[:limit]


def audited_matching_ids(
    *, actor: Any, reason: str, request: Any = None, **filters: Any
) -> list[str]:
    """The ids "roll back every half matching" acts on (``matching_ids``),
    asked of the node within an audited action (``transaction.
    rollback_matching``, object ``<node>/*``, the filter as ``before``): a
    node that does not answer, or refuses the filter, leaves one FAILED
    record; each half rolled back then has its own record (``perform``)."""
    return audited(
        lambda: matching_ids(**filters),
        actor=actor,
        request=request,
        action="transaction.rollback_matching",
        object_type="transaction",
        object_id="*",
        reason=reason,
        before={"filters": filters},
        after=lambda ids: {"matched": len(ids)},
    )


def transaction_metrics() -> Any:
    return node_ops().transaction_metrics()


def seed_demo_transactions(broker: Any, rnd: Any) -> int:
    """Demo halves: committed, rolled back, healthy pending and stuck ones
    (several failed check-backs), from three producer groups."""
    import json

    from broker_core import Message
    from broker_core.transaction import CheckAnswer

    service = get_transaction_service()
    groups = {
        "PID_order_service": "orders",
        "PID_payment_gateway": "payments",
        "PID_warehouse": "inventory",
    }
    count = 0
    for i in range(60):
        group = rnd.choice(list(groups))
        topic = groups[group]
        body = json.dumps(
            {
                "tx": i,
                "amount": round(rnd.uniform(5, 500), 2),
                "customer": f"C{rnd.randint(1, 5000):05d}",
            }
        ).encode()
        r = service.send_half(
            group,
            Message(topic, body, tags="tx", keys=[f"tx-{i}", f"order-{1000 + i}"]),
        )
        count += 1
        kind = i % 6
        if kind == 0:
            service.end_transaction(r.transaction_id, group, "COMMIT")
        elif kind == 1:
            service.end_transaction(r.transaction_id, group, "ROLLBACK")
        elif kind in (2, 3):
            half = service.locate(r.transaction_id)
            now = int(time.time() * 1000)
            for n in range(rnd.randint(6, 12)):
                service.record_check(
                    half,
                    CheckAnswer.FAILED,
                    "webhook",
                    f"http://{group.lower()}.internal/tx-check",
                    now - (12 - n) * 60_000,
                    5_000_000,
                    "connection refused",
                )
    return count


SAMPLE_EVERY_S = 10
SAMPLE_KEEP_H = 24


def sample_metrics() -> Any:
    """Return current metrics; store a sample when the last is over 10 s old
    or of an earlier minute (the beat also runs this at every minute's start:
    that sample bounds the overview's per-minute counts)."""
    from datetime import timedelta

    from django.utils import timezone

    from console.transactions.models import TransactionSample

    m = transaction_metrics()
    now = timezone.now()
    last = (
        TransactionSample.objects.order_by("-at").values_list("at", flat=True).first()
    )
    if (
        last is None
        or (now - last).total_seconds() >= SAMPLE_EVERY_S
        or last.replace(second=0, microsecond=0) != now.replace(second=0, microsecond=0)
    ):
        TransactionSample.objects.create(
            at=now,
            pending=m.pending,
            discarded=m.discarded,
            commits=m.commits,
            rollbacks=m.rollbacks,
            discards=m.discards,
            checks_sent=m.checks_sent,
            checks_answered=m.checks_answered,
            checks_failed=m.checks_failed,
        )
        TransactionSample.objects.filter(
            at__lt=now - timedelta(hours=SAMPLE_KEEP_H)
        ).delete()
    return m


def metric_series(hours: int = 24) -> dict[str, list[Any]]:
    """Counts per clock minute from the samples (``console.ui.buckets``):
    commits, rollbacks, discards, check-backs sent and failed, and the
    pending halves at the end of each minute."""
    from datetime import timedelta

    from django.utils import timezone

    from console.transactions.models import TransactionSample
    from console.ui.buckets import per_minute

    rows = list(
        TransactionSample.objects.filter(
            at__gte=timezone.now() - timedelta(hours=hours)
        ).order_by("at")
    )
    fields = ("commits", "rollbacks", "discards", "checks_sent", "checks_failed")
    counts = per_minute(
        [(r.at, {f: getattr(r, f) for f in fields}) for r in rows], fields
    )
    pending = []
    i = 0
    for label in counts["t"]:
        edge = datetime.fromisoformat(label) + timedelta(minutes=1)
        while i + 1 < len(rows) and rows[i + 1].at <= edge:
            i += 1
        pending.append(rows[i].pending)
    return {
        "t": counts["t"],
        "pending": pending,
        "commits_min": counts["commits"],
        "rollbacks_min": counts["rollbacks"],
        "discards_min": counts["discards"],
        "checks_min": counts["checks_sent"],
        "failed_min": counts["checks_failed"],
    }


#: Redis key of the stuck counts the periodic check publishes for the banner.
STUCK_KEY = "transactions:stuck"


def publish_stuck_counts(client: Any) -> dict[str, Any]:
    """Count stuck halves and keep the answer in Redis for every console process.

    Called by the periodic check (``tasks.run_check``) after each run, so no
    page request pays for a count over the whole index; the key expires after
    three intervals, so a count is never shown long after the check stopped
    (the banner then says the check is not running)."""
    counts: dict[str, Any] = dict(stuck_counts())
    counts["at"] = time.time()
    ttl = max(30, int(3 * float(settings.TRANSACTION_CHECK_INTERVAL)))
    client.set(STUCK_KEY, json.dumps(counts), ex=ttl)
    return counts


def published_stuck_counts(client: Any) -> dict[str, Any] | None:
    """The last counts ``publish_stuck_counts`` kept, or None."""
    raw = client.get(STUCK_KEY)
    return None if raw is None else json.loads(raw)


def stuck_counts() -> dict[str, int]:
    """Pending halves checked too often, and pending halves too old."""
    age_s, checks = stuck_thresholds()
    ops = node_ops()
    by_checks = (
        ops.list_halves(min_checks=checks, page_size=1, refresh=False).total or 0
    )
    by_age = ops.list_halves(min_age_s=age_s, page_size=1, refresh=False).total or 0
    return {
        "by_checks": by_checks,
        "by_age": by_age,
        "age_s": int(age_s),
        "checks": checks,
    }
