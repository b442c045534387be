"""Roles: the Django groups viewer, operator and admin, ordered by power.

A viewer reads (never message bodies); an operator also sees bodies and rolls
back, resumes, cancels, resends and resets offsets; an admin also commits and
administers topics, groups and users. Superusers are admins.
"""

from __future__ import annotations

from typing import Any

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"

#: Lowest to highest; a role includes every role before it.
ROLES: tuple[str, ...] = (VIEWER, OPERATOR, ADMIN)
_RANK = {name: i for i, name in enumerate(ROLES)}


def user_role(user: Any) -> str | None:
    """Return the highest role of ``user``, or None (anonymous or no group).

    The answer is cached on the user object for the rest of the request.
    """
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    if not getattr(user, "is_active", True):
        return None
    cached = getattr(user, "_console_role", False)
    if cached is not False:
        return cached
    if user.is_superuser:
        role: str | None = ADMIN
    else:
        names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        role = max(names, key=_RANK.__getitem__) if names else None
    user._console_role = role
    return role


def has_role(user: Any, role: str) -> bool:
    """Return True when ``user`` holds ``role`` or a higher one."""
    if role not in _RANK:
        raise ValueError(f"unknown role {role!r}")
    current = user_role(user)
    return current is not None and _RANK[current] >= _RANK[role]


def can_see_bodies(user: Any) -> bool:
    """Message bodies are for operators and admins only."""
    return has_role(user, OPERATOR)


def set_role(user: Any, role: str) -> None:
    """Make ``role`` the only console role of ``user``."""
    from django.contrib.auth.models import Group

    if role not in _RANK:
        raise ValueError(f"unknown role {role!r}")
    user.groups.remove(*Group.objects.filter(name__in=ROLES))
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    if hasattr(user, "_console_role"):
        del user._console_role
