"""Django admin helpers: store-derived tables are shown, never edited there."""

from __future__ import annotations

from typing import Any


class ReadOnlyAdmin:
    """A ModelAdmin mixin: every field read-only; no add, change or delete.

    The store is the source of truth; change it through the console's actions,
    which are audited.
    """

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        return [f.name for f in self.model._meta.fields]  # type: ignore[attr-defined]

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
