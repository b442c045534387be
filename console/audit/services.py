"""Write audit records; every console service calls ``record_audit``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core.serializers.json import DjangoJSONEncoder

from console.audit.models import AuditRecord
from console.core.client_address import client_ip

T = TypeVar("T")


def _client_ip(request: Any) -> str | None:
    return client_ip(request) if request is not None else None


def record_audit(
    *,
    actor: Any,
    action: str,
    object_type: str,
    object_id: str = "",
    reason: str = "",
    before: Any = None,
    after: Any = None,
    status: str = AuditRecord.Status.SUCCESS,
    message: str = "",
    request: Any = None,
) -> AuditRecord:
    """Append one audit record (who, what, why, before/after, outcome).

    ``actor`` is a user or None (a management command or task); ``request``
    supplies the request id and client address when there is one.
    """
    if actor is None and request is not None:
        actor = getattr(request, "user", None)
    is_user = actor is not None and getattr(actor, "is_authenticated", False)
    return AuditRecord.objects.create(
        actor=actor if is_user else None,
        actor_username=actor.get_username() if is_user else "system",
        action=action,
        object_type=object_type,
        object_id=str(object_id)[:255],
        reason=reason,
        before=_jsonable(before),
        after=_jsonable(after),
        status=status,
        message=message[:2000],
        request_id=getattr(request, "request_id", "") if request is not None else "",
        ip=_client_ip(request),
    )


def _jsonable(value: Any) -> Any:
    import json

    if value is None:
        return None
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder, default=str))


def node_object_id(object_id: str, node: str = "") -> str:
    """The one audit object id of something on a node: ``<node>/<object>``,
    ``<node>`` the node the request acts on (``scope.acting_node``: the picked
    node, a Cluster page action's node, the ``X-Broker-Node`` header, else
    the console's own, ``BROKER_NODE`` or ``local``) unless given."""
    from console.cluster.scope import acting_node

    return f"{node or acting_node()}/{object_id}"


def audited(
    fn: Callable[[], T],
    *,
    actor: Any,
    action: str,
    object_type: str,
    object_id: str | Callable[[], str] = "",
    reason: str = "",
    before: Any = None,
    after: Callable[[T], Any] | None = None,
    request: Any = None,
    note: Callable[[T], str] | None = None,
    on_node: bool = True,
) -> T:
    """Run ``fn`` (a broker call) and audit its outcome, success or failure.

    A failure is recorded with its message and the exception re-raised, so the
    record exists whatever the caller does next. ``before`` may be a function,
    called first: what it asks of the node (and ``fn``'s own look-up of the
    node) fails as the action, audited. ``note`` words a success that
    deserves one (a second commit that changed nothing). The object is
    ``node_object_id(object_id)``, ``<node>/<object>``, whichever page or API
    acted; ``on_node=False`` for an object that is no node's (a node itself:
    its promotion). ``object_id`` may be a function, called once the action
    ended (an id that ``before``'s look-up makes canonical).
    """

    def ident() -> str:
        raw = object_id() if callable(object_id) else object_id
        return node_object_id(raw) if on_node else raw

    asked = before
    before = None if callable(asked) else asked
    try:
        if callable(asked):
            before = asked()
        result = fn()
    except Exception as exc:
        record_audit(
            actor=actor,
            action=action,
            object_type=object_type,
            object_id=ident(),
            reason=reason,
            before=before,
            status=AuditRecord.Status.FAILED,
            message=f"{type(exc).__name__}: {exc}",
            request=request,
        )
        raise
    record_audit(
        actor=actor,
        action=action,
        object_type=object_type,
        object_id=ident(),
        reason=reason,
        before=before,
        after=after(result) if after else None,
        message=note(result) if note else "",
        request=request,
    )
    return result


def audit_lockout(
    sender: Any, request: Any = None, username: str = "", ip_address: str = "", **_: Any
) -> None:
    """Record a login lock-out (django-axes ``user_locked_out``), or an API
    token lock-out (a bad token's failures count as failed logins of a
    pseudo-user named after its fingerprint, never the token)."""
    from console.core.authentication import API_TOKEN_USER, is_token_user

    if is_token_user(username):
        fingerprint = username.removeprefix(API_TOKEN_USER).strip()
        action, kind, object_id = "api_token.locked_out", "api_token", fingerprint
        message = f"API token {fingerprint} refused too often, last from {ip_address}"
    else:
        action, kind, object_id = "login.locked_out", "user", username or ""
        message = f"too many failed logins for {username!r} from {ip_address}"
    record_audit(
        actor=None,
        action=action,
        object_type=kind,
        object_id=object_id,
        status=AuditRecord.Status.DENIED,
        message=message,
        request=request,
    )
