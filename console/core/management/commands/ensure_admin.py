"""Create the first admin account when none exists."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create an admin from ADMIN_USERNAME/ADMIN_PASSWORD, or a generated one."

    def handle(self, *args: object, **options: object) -> None:
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            self.stdout.write("admin account exists")
            return
        username = os.environ.get("ADMIN_USERNAME", "admin")
        password = os.environ.get("ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        if os.environ.get("ADMIN_PASSWORD"):
            self.stdout.write(f"created admin account {username!r}")
        else:
            # Printed once: it is stored only as a hash.
            self.stdout.write(
                self.style.WARNING(
                    f"created admin account {username!r} with password {password!r}"
                    " (shown once; change it after signing in)"
                )
            )
