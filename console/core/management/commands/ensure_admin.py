"""Create the first admin account when none exists."""

import os
import secrets
from pathlib import Path

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
            # The account stores only a hash; the generated password is also
            # kept in a file only its owner reads (``make run`` prints it
            # again below its URLs, after which the log scrolls fast).
            from django.conf import settings

            path = Path(settings.VAR_DIR) / "admin_password"
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{username} {password}\n")
            self.stdout.write(
                self.style.WARNING(
                    f"created admin account {username!r} with password {password!r}"
                    f" (also in {path}: delete it once read; change the password"
                    f" after signing in, or: manage.py changepassword {username})"
                )
            )
