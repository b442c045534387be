"""Producer group services: check-back transport settings (admin, audited)
and each group's pending halves and latest checks."""

from __future__ import annotations

from typing import Any

from broker_core.validation import validate_group
from console.audit.services import audited
from console.brokerlink import node_ops


def producer_groups() -> list[dict[str, Any]]:
    """Every group with a checker configured or with halves, and its counts."""
    from broker_core.transaction import statetable as S

    ops = node_ops()
    configured = ops.checkers()
    counts: dict[str, dict[int, int]] = {}
    for group, state, n in ops.producer_group_counts():
        counts.setdefault(group, {})[state] = n
    return [
        {
            "group": group,
            "checker": configured.get(group),
            "pending": counts.get(group, {}).get(S.PENDING, 0),
            "discarded": counts.get(group, {}).get(S.DISCARDED, 0),
        }
        for group in sorted(set(counts) | set(configured))
    ]


def group_detail(group: str, limit: int = 25) -> dict[str, Any]:
    """A group's checker and its most recently checked halves with their last answer."""
    ops = node_ops()
    recent = ops.list_halves(
        producer_group=group,
        state=None,
        sort="-last_check",
        page_size=limit,
        count_total=False,
    ).items
    checks = []
    for info in recent:
        if info.last_check_at is None:
            continue
        events = [
            e for e in ops.get_half(info.transaction_id).history if e.kind == "CHECK"
        ]
        if events:
            checks.append((info, events[-1]))
    return {
        "group": group,
        "checker": ops.checkers().get(group),
        "checks": checks,
        "clients": connected_clients(group),
    }


def connected_clients(group: str | None = None) -> list[dict[str, Any]]:
    """Clients the node's gRPC endpoint last saw, optionally only those of
    ``group`` (``broker_core.clients.client_rows``)."""
    return node_ops().clients(group)


def configure_checker(
    *,
    actor: Any,
    group: str,
    url: str,
    secret: str,
    timeout_s: float,
    reason: str = "",
    request: Any = None,
) -> None:
    """Set the webhook that answers check-backs for ``group`` (admin)."""
    validate_group(group)
    audited(
        lambda: node_ops().configure_checker(group, url, secret, timeout_s),
        actor=actor,
        request=request,
        action="producer_group.configure_checker",
        object_type="producer_group",
        object_id=group,
        reason=reason,
        before=lambda: node_ops().checkers().get(group),
        after=lambda _r: {
            "kind": "webhook",
            "url": url,
            "timeout_s": timeout_s,
            "secret": "***",
        },
    )


def remove_checker(
    *, actor: Any, group: str, reason: str = "", request: Any = None
) -> None:
    audited(
        lambda: node_ops().remove_checker(group),
        actor=actor,
        request=request,
        action="producer_group.remove_checker",
        object_type="producer_group",
        object_id=group,
        reason=reason,
        before=lambda: node_ops().checkers().get(group),
    )
