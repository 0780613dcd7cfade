"""Internal: a partial index where the database has them, a plain one elsewhere.

Django skips the ``WHERE`` of a conditional index on MariaDB/MySQL and warns
(models.W037) on every check; this index keeps its condition to itself until
the schema editor says the database supports it.

Without the condition a plain index holds every row, so one that serves a
hot path can name ``fallback_fields`` for those databases: the condition's
column first, so that one range scan per matching value still reaches only
the rows the partial index would hold (the claim index: finished jobs are
not walked past on every claim).

``partial_on`` names the vendors that get the condition (default: every one
that has partial indexes); the others get the plain index. The general
indexes that leave the executing and completed jobs out are partial on
PostgreSQL only: SQLite's planner proves a partial index usable only from
terms written the same way, so ``state = 'dead'`` would not reach an index
whose condition lists the states.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q


class PartialIndex(models.Index):
    def __init__(self, *args: Any, where: Q, fallback_fields: list[str] | None = None,
                 partial_on: tuple[str, ...] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.where = where
        self.fallback_fields = list(fallback_fields) if fallback_fields else None
        self.partial_on = tuple(partial_on) if partial_on else None

    def is_partial(self, connection: Any) -> bool:
        """Whether the index on ``connection`` has the condition (else it is plain)."""
        return bool(connection.features.supports_partial_indexes
                    and (self.partial_on is None or connection.vendor in self.partial_on))

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        if not self.is_partial(schema_editor.connection):
            if not self.fallback_fields:
                return super().create_sql(model, schema_editor, using=using, **kwargs)
            orders = self.fields_orders
            self.fields_orders = [(name.removeprefix("-"), "DESC" if name.startswith("-") else "")
                                  for name in self.fallback_fields]
            try:
                return super().create_sql(model, schema_editor, using=using, **kwargs)
            finally:
                self.fields_orders = orders
        self.condition = self.where
        try:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        finally:
            self.condition = None

    def deconstruct(self) -> Any:
        path, args, kwargs = super().deconstruct()
        kwargs["where"] = self.where
        if self.fallback_fields:
            kwargs["fallback_fields"] = self.fallback_fields
        if self.partial_on:
            kwargs["partial_on"] = self.partial_on
        return path, args, kwargs

    def __eq__(self, other: object) -> bool:
        return (super().__eq__(other) and self.where == getattr(other, "where", None)
                and self.fallback_fields == getattr(other, "fallback_fields", None)
                and self.partial_on == getattr(other, "partial_on", None))

    __hash__ = models.Index.__hash__


class PartialUniqueConstraint(models.UniqueConstraint):
    """A unique index over the rows matching ``where`` where the database has partial indexes.

    Elsewhere (MariaDB) it is a plain unique constraint, which must then hold
    NULL for the rows outside ``where`` (NULLs never clash).
    """

    def __init__(self, *args: Any, where: Q, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.where = where

    def _conditional(self, schema_editor: Any, method: Any, *args: Any, **kwargs: Any) -> Any:
        if schema_editor.connection.features.supports_partial_indexes:
            self.condition = self.where
        try:
            return method(*args, **kwargs)
        finally:
            self.condition = None

    def constraint_sql(self, model: Any, schema_editor: Any) -> Any:
        return self._conditional(schema_editor, super().constraint_sql, model, schema_editor)

    def create_sql(self, model: Any, schema_editor: Any) -> Any:
        return self._conditional(schema_editor, super().create_sql, model, schema_editor)

    def remove_sql(self, model: Any, schema_editor: Any) -> Any:
        return self._conditional(schema_editor, super().remove_sql, model, schema_editor)

    def deconstruct(self) -> Any:
        path, args, kwargs = super().deconstruct()
        kwargs["where"] = self.where
        return path, args, kwargs

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other) and self.where == getattr(other, "where", None)

    __hash__ = models.UniqueConstraint.__hash__
