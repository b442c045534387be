"""Account operations: create a user with a role, change a role (audited)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.db import transaction

from console.audit.services import record_audit
from console.ui.roles import ADMIN, ROLES, set_role, user_role


def create_user(
    username: str,
    role: str,
    password: str,
    *,
    actor: Any = None,
    request: Any = None,
    reason: str = "",
) -> Any:
    """Create ``username`` with ``role``; admins may also use Django admin.

    Raises ``ValueError`` for an unknown role or an existing user, and Django's
    ``ValidationError`` for a weak password.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    User = get_user_model()
    if User.objects.filter(username=username).exists():
        raise ValueError(f"user {username!r} already exists")
    validate_password(password)
    with transaction.atomic():
        user = User.objects.create_user(username=username, password=password)
        user.is_staff = role == ADMIN
        user.save(update_fields=["is_staff"])
        set_role(user, role)
        record_audit(
            actor=actor,
            request=request,
            action="user.create",
            object_type="user",
            object_id=username,
            reason=reason,
            after={"role": role},
        )
    return user


def change_role(
    user: Any, role: str, *, actor: Any, request: Any = None, reason: str = ""
) -> None:
    """Give ``user`` the single role ``role``."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    before = user_role(user)
    with transaction.atomic():
        set_role(user, role)
        user.is_staff = role == ADMIN or user.is_superuser
        user.save(update_fields=["is_staff"])
        record_audit(
            actor=actor,
            request=request,
            action="user.change_role",
            object_type="user",
            object_id=user.username,
            reason=reason,
            before={"role": before},
            after={"role": role},
        )


def rotate_token(*, actor: Any, request: Any = None) -> str:
    """Replace the user's API token with a new one; return its key (shown once)."""
    from rest_framework.authtoken.models import Token

    with transaction.atomic():
        had = Token.objects.filter(user=actor).delete()[0] > 0
        token = Token.objects.create(user=actor)
        record_audit(
            actor=actor,
            request=request,
            action="user.rotate_token",
            object_type="user",
            object_id=actor.get_username(),
            before={"had_token": had},
            after={"token_prefix": token.key[:6]},
        )
    return token.key


def set_time_zone(user: Any, zone: str) -> None:
    """Remember the zone ``user`` reads times in ("" for the default)."""
    from console.accounts.models import Preference

    Preference.objects.update_or_create(user=user, defaults={"time_zone": zone})
