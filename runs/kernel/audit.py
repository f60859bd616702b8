"""Append-only audit rows: they may be created, and settled once by their service, never
altered or deleted through the ORM afterwards."""

from typing import Any, NoReturn

from django.db import models


class AuditImmutable(Exception):
    """An attempt to change or delete an audit row."""


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> NoReturn:
        raise AuditImmutable(f"{self.model.__name__} rows are append-only")

    def delete(self) -> NoReturn:
        raise AuditImmutable(f"{self.model.__name__} rows are append-only")

    def settle(self, **kwargs: Any) -> int:
        """The one sanctioned write after creation: used by services for a guarded,
        single-shot transition (the filter carries the state it must still be in)."""
        return super().update(**kwargs)


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AuditImmutable(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AuditImmutable(f"{type(self).__name__} rows are append-only")
