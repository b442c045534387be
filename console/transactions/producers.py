"""Producer group services: check-back transport settings (admin, audited)
and each group's pending halves and latest checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings

from broker_core.clients import client_rows
from broker_core.validation import validate_group
from console.audit.services import audited
from console.brokerlink import get_transaction_service


def producer_groups() -> list[dict[str, Any]]:
    """Every group with a checker configured or with halves, and its counts."""
    from broker_core.transaction import statetable as S

    svc = get_transaction_service()
    svc.refresh_index(2.0)
    configured = svc.checkers.configured()
    # One pass over the index's (producer_group, state, born_ts) index, through
    # its public SQL entry point, instead of two counts per group.
    counts: dict[str, dict[int, int]] = {}
    for group, state, n in svc.index.query(
        "SELECT producer_group, state, COUNT(*) FROM halves "
        "GROUP BY producer_group, state"
    ):
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
        "clients": connected_clients(group),
    }


def connected_clients(group: str | None = None) -> list[dict[str, Any]]:
    """Clients the gRPC endpoint last saw, optionally only those of ``group``
    (``broker_core.clients.client_rows``).

    The endpoint rewrites ``<store>/clients.json`` atomically.
    """
    path = Path(settings.BROKER_STORE_DIR) / "clients.json"
    try:
        clients = json.loads(path.read_text()).get("clients", [])
    except (OSError, ValueError, AttributeError):
        return []
    return client_rows(clients if isinstance(clients, list) else [], group)


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
