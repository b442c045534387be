"""``manage.py create_user USERNAME --role viewer|operator|admin --password ...``."""

from __future__ import annotations

import getpass
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from console.accounts.services import create_user
from console.ui.roles import ROLES


class Command(BaseCommand):
    help = "Create a console user with a role (viewer, operator or admin)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)
        parser.add_argument("--password", help="prompted for when omitted")

    def handle(self, *args: Any, **opts: Any) -> None:
        password = opts["password"] or getpass.getpass("Password: ")
        try:
            create_user(
                opts["username"], opts["role"], password, reason="manage.py create_user"
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(f"created {opts['username']} ({opts['role']})")
