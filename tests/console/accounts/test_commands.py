"""``manage.py create_user`` gives a new user exactly one role, audited."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from console.audit.models import AuditRecord
from console.ui.roles import user_role

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_create_user(django_user_model, role) -> None:
    call_command("create_user", "alice", "--role", role, "--password", "s3cret-enough")
    user = django_user_model.objects.get(username="alice")
    assert user.check_password("s3cret-enough")
    assert user_role(user) == role
    assert user.is_staff == (role == "admin")
    assert AuditRecord.objects.get(action="user.create").object_id == "alice"


def test_duplicate_and_weak_password(django_user_model) -> None:
    call_command(
        "create_user", "bob", "--role", "viewer", "--password", "s3cret-enough"
    )
    with pytest.raises(CommandError, match="already exists"):
        call_command(
            "create_user", "bob", "--role", "viewer", "--password", "s3cret-enough"
        )
    with pytest.raises(CommandError):
        call_command("create_user", "carol", "--role", "viewer", "--password", "short")
    assert not django_user_model.objects.filter(username="carol").exists()
