"""The node's HA role, kept in ``config/role.json`` for the endpoint and the CLI.

``{"role": "SLAVE", "master": "host:port", "since": ms}`` while a store follows
a master; ``SYNC_MASTER`` or ``ASYNC_MASTER`` for a writable node (after a
promotion ``promoted_at`` and ``promoted_at_offset`` say when and where). A
store without the file is a master (``ASYNC_MASTER``), as before HA existed.
"""

from __future__ import annotations

import enum
import json
import time
from pathlib import Path
from typing import Any

from broker_core.metadata import atomic_write_json

ROLE_FILE = "role.json"


class Role(enum.StrEnum):
    SLAVE = "SLAVE"
    SYNC_MASTER = "SYNC_MASTER"
    ASYNC_MASTER = "ASYNC_MASTER"


def read_role(root: str | Path) -> dict[str, Any]:
    """Return the role record of the store in ``root`` (ASYNC_MASTER if none)."""
    try:
        data = json.loads((Path(root) / "config" / ROLE_FILE).read_bytes())
    except (FileNotFoundError, ValueError):
        return {"role": Role.ASYNC_MASTER.value}
    if not isinstance(data, dict) or data.get("role") not in set(Role):
        return {"role": Role.ASYNC_MASTER.value}
    return data


def write_role(root: str | Path, role: Role, **extra: Any) -> dict[str, Any]:
    """Write the role record atomically; return it."""
    data = {"role": role.value, "since": int(time.time() * 1000), **extra}
    atomic_write_json(Path(root) / "config" / ROLE_FILE, data)
    return data


def is_slave(root: str | Path) -> bool:
    """Whether the store in ``root`` follows a master (client writes refused)."""
    return read_role(root)["role"] == Role.SLAVE.value
