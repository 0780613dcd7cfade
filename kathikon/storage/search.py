"""Internal: the job list's structured search — a JSON key and value in args or meta, and
the text of a job's last error.

``args.user_id=42`` and ``meta.tenant=acme`` (a dotted key reaches into nested objects;
the value is read as JSON when it parses, else as text) match jobs whose args (or meta)
hold that value at that key. On PostgreSQL it is a containment test, ``args @> '{…}'``,
which the partial GIN index ``kathikon_job_failed_args`` (migration 0018: dead,
retryable and cancelled jobs, the ones people search) answers when the list is filtered
to those states; on MariaDB ``JSON_CONTAINS`` and on SQLite a JSON path equality, both
read row by row. ``error:timeout`` matches jobs whose last error's message contains the
text (case-insensitive), among the newest :data:`ERROR_SCAN` jobs the other filters match.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from kathikon.models import Job
from kathikon.storage import vendor

ERROR_SCAN = 20_000  # jobs an error:… search reads at most (the newest the filters match)
FIELD = re.compile(r"^(args|meta)\.([A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*)=(.*)$", re.S)
ERROR = re.compile(r"^error:(.+)$", re.S | re.I)

_LAST_MESSAGE = {
    "postgresql": "(kathikon_job.errors -> -1 ->> 'message')",
    "mysql": "JSON_UNQUOTE(JSON_EXTRACT(kathikon_job.errors, CONCAT('$[', "
             "JSON_LENGTH(kathikon_job.errors) - 1, '].message')))",
    "sqlite": "json_extract(kathikon_job.errors, '$[#-1].message')",
}


def structured(queryset: QuerySet[Job], term: str) -> QuerySet[Job] | None:
    """``queryset`` narrowed by a structured search term, or None when ``term`` is not one."""
    found = FIELD.match(term)
    if found:
        column, path, raw = found.group(1), found.group(2).split("."), found.group(3)
        value = _value(raw)
        if vendor.vendor() != "sqlite":  # containment (PostgreSQL: the GIN index's operator;
            # MariaDB: JSON_CONTAINS, which tells 42 from "42")
            nested: Any = value
            for key in reversed(path):
                nested = {key: nested}
            return queryset.filter(**{f"{column}__contains": nested})
        return queryset.filter(**{f"{column}__{'__'.join(path)}": value})
    found = ERROR.match(term)
    if found:
        text = found.group(1).strip()
        # No index reads inside an error: search the newest ERROR_SCAN jobs the other
        # filters match (one query finds the id of the oldest of them), so the cost stays
        # flat at millions of dead jobs (1.2 s over 300,000 dead jobs without the bound).
        oldest = list(queryset.order_by("-id").values_list("pk", flat=True)
                      [ERROR_SCAN - 1:ERROR_SCAN])
        if oldest:
            queryset = queryset.filter(pk__gte=oldest[0])
        # lowered here and in SQL: MariaDB's JSON strings compare case-sensitively
        last = RawSQL(f"LOWER({_LAST_MESSAGE[vendor.vendor()]})", [])
        return queryset.annotate(kathikon_last_error=last).filter(
            kathikon_last_error__contains=text.lower())
    return None


def _value(raw: str) -> Any:
    """``42`` → 42, ``true`` → True, ``"x"`` → "x", anything else → the text itself."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw
