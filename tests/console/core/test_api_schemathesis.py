"""Schemathesis against the live OpenAPI schema: every operation, generated
valid and invalid requests with an admin token, on a live server over a seeded
store. No request may get a 5xx. Bounded: a fixed number of examples per
operation, derandomized so CI runs the same requests every time."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.management import call_command
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EXAMPLES = 40


@pytest.fixture
def admin_token(users) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=users["admin"]).key


def _generated_schema() -> dict:
    """The schema ``/api/schema/`` serves, from the same generator (collection
    runs before the test database exists, so it is not fetched over HTTP)."""
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


schema = schemathesis.openapi.from_dict(_generated_schema())


@pytest.fixture
def seeded(live_server, broker, admin_token):
    call_command("seed_demo", "--messages", "100")
    return live_server.url


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_generated_request_gets_a_server_error(case, seeded, admin_token) -> None:
    case.call_and_validate(
        base_url=seeded,
        headers={"Authorization": f"Token {admin_token}"},
        checks=[not_a_server_error],
    )


def test_the_fuzzed_schema_is_the_one_served(client, admin_token) -> None:
    served = client.get(
        "/api/schema/?format=json", HTTP_AUTHORIZATION=f"Token {admin_token}"
    )
    assert served.status_code == 200
    assert served.json() == schema.raw_schema
