"""Producer group services: check-back transport settings (admin, audited)
and each group's pending halves and latest checks."""

from __future__ import annotations

from typing import Any

from broker_core.validation import validate_group
from console.audit.services import audited
from console.brokerlink import get_transaction_service


def producer_groups() -> list[dict[str, Any]]:
    """Every group with a checker configured or with halves, and its counts."""
    svc = get_transaction_service()
    svc.refresh_index(2.0)
    configured = svc.checkers.configured()
    # The index's public SQL entry point; halves_group indexes this column.
    seen = {g for (g,) in svc.index.query("SELECT DISTINCT producer_group FROM halves")}
    rows = []
    for group in sorted(seen | set(configured)):
        pending = svc.list_halves(producer_group=group, page_size=1, refresh=False)
        discarded = svc.list_halves(
            producer_group=group, state="DISCARDED", page_size=1, refresh=False
        )
        latest = svc.list_halves(
            producer_group=group,
            state=None,
            sort="-last_check",
            page_size=1,
            count_total=False,
            refresh=False,
        ).items
        rows.append(
            {
                "group": group,
                "checker": configured.get(group),
                "pending": pending.total or 0,
                "discarded": discarded.total or 0,
                "last_check_at": latest[0].last_check_at if latest else None,
            }
        )
    return rows


def group_detail(group: str, limit: int = 25) -> dict[str, Any]:
    """A group's checker and its most recently checked halves with their last answer."""
    svc = get_transaction_service()
    recent = svc.list_halves(
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
            e for e in svc.get_half(info.transaction_id).history if e.kind == "CHECK"
        ]
        if events:
            checks.append((info, events[-1]))
    return {
        "group": group,
        "checker": svc.checkers.configured().get(group),
        "checks": checks,
    }


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
    svc = get_transaction_service()
    before = svc.checkers.configured().get(group)
    audited(
        lambda: svc.checkers.configure(
            group, "webhook", url=url, secret=secret, timeout_s=timeout_s
        ),
        actor=actor,
        request=request,
        action="producer_group.configure_checker",
        object_type="producer_group",
        object_id=group,
        reason=reason,
        before=before,
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
    svc = get_transaction_service()
    before = svc.checkers.configured().get(group)
    audited(
        lambda: svc.checkers.remove(group),
        actor=actor,
        request=request,
        action="producer_group.remove_checker",
        object_type="producer_group",
        object_id=group,
        reason=reason,
        before=before,
    )
