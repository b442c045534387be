"""Print where the running system answers."""

import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Print the console, API, health and gRPC addresses."

    def handle(self, *args: object, **options: object) -> None:
        web = os.environ.get("WEB_LISTEN", "127.0.0.1:8000")
        self.stdout.write(f"console   http://{web}/")
        self.stdout.write(f"API docs  http://{web}/api/docs/")
        self.stdout.write(f"health    http://{web}/healthz")
        self.stdout.write(f"gRPC      {settings.GRPC_LISTEN}")
        self.stdout.write(f"store     {settings.BROKER_STORE_DIR}")
        first = Path(settings.VAR_DIR) / "admin_password"
        if first.exists():
            self.stdout.write(
                f"sign in   {first.read_text().strip()}   (the generated first "
                f"admin; delete {first} once read)"
            )
        self.stdout.write(
            "password  forgotten: .venv/bin/python manage.py changepassword USER"
        )
