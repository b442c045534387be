"""A secret generated once into a file and shared by every process that reads it."""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path


def shared_secret(path: Path) -> str:
    """Return the secret in ``path``, creating it (mode 0600) if there is none.

    Several processes (two Celery workers, gunicorn's workers) may start at once
    on a new ``var/``: each writes its own temporary file and the first hard link
    wins, so every one of them reads the same whole key and none loses its file.
    """
    if not path.exists():
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w") as tmp:
                tmp.write(secrets.token_urlsafe(50))
            os.chmod(name, 0o600)
            try:
                os.link(name, path)
            except FileExistsError:
                pass
        finally:
            os.unlink(name)
    return path.read_text().strip()
