"""Internal: a partial index where the database has them, a plain one elsewhere.

Django skips the ``WHERE`` of a conditional index on MariaDB/MySQL and warns
(models.W037) on every check; this index keeps its condition to itself until
the schema editor says the database supports it.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q


class PartialIndex(models.Index):
    def __init__(self, *args: Any, where: Q, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.where = where

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        if not schema_editor.connection.features.supports_partial_indexes:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        self.condition = self.where
        try:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        finally:
            self.condition = None

    def deconstruct(self) -> Any:
        path, args, kwargs = super().deconstruct()
        kwargs["where"] = self.where
        return path, args, kwargs

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other) and self.where == getattr(other, "where", None)

    __hash__ = models.Index.__hash__
