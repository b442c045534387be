"""Changes made through the Django admin are audit records, like the console's."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="x" * 12)
    client.force_login(user)
    return client


def _records(action: str):
    from console.audit.models import AuditRecord

    return list(AuditRecord.objects.filter(action=action).order_by("id"))


def test_user_edits_and_password_changes_are_audited(root, users) -> None:
    viewer = users["viewer"]
    r = root.post(
        f"/admin/auth/user/{viewer.pk}/change/",
        {
            "username": "viewer",
            "first_name": "Vera",
            "last_name": "",
            "email": "",
            "is_active": "on",
            "is_staff": "on",  # the edit that matters: admin access
            "groups": [g.pk for g in viewer.groups.all()],
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
    )
    assert r.status_code == 302, r.content[:2000]
    (change,) = _records("admin.change")
    assert change.actor_username == "root"
    assert (change.object_type, change.object_id) == ("auth.user", str(viewer.pk))
    assert "First name" in change.message and "Staff status" in change.message
    assert change.ip == "127.0.0.1" and change.request_id
    r = root.post(
        f"/admin/auth/user/{viewer.pk}/password/",
        {"password1": "another-long-pass-9", "password2": "another-long-pass-9"},
    )
    assert r.status_code == 302
    assert _records("admin.change")[-1].message == "changed password"


def test_deletions_and_bulk_actions_are_audited(root, users) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=users["operator"])
    r = root.post(
        f"/admin/authtoken/tokenproxy/{users['operator'].pk}/delete/", {"post": "yes"}
    )
    assert r.status_code == 302
    (gone,) = _records("admin.delete")
    assert gone.object_type == "authtoken.tokenproxy"
    assert not Token.objects.filter(key=token.key).exists()
    every = IntervalSchedule.objects.create(every=60, period="seconds")
    task = PeriodicTask.objects.create(
        name="t", task="transactions.check", interval=every, enabled=True
    )
    r = root.post(
        "/admin/django_celery_beat/periodictask/",
        {"action": "disable_tasks", "_selected_action": [task.pk]},
    )
    assert r.status_code == 302
    task.refresh_from_db()
    assert not task.enabled
    (act,) = _records("admin.action")
    assert act.after == {"action": "disable_tasks"}
    assert act.object_id == str(task.pk)
