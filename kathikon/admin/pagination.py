"""Internal: an admin paginator that never counts a million rows.

Unfiltered lists show PostgreSQL's planner estimate (``pg_class.reltuples``);
filtered lists count at most ``CAP + 1`` rows (``COUNT(*)`` over a ``LIMIT``
subquery). Either way navigation stops after ``CAP`` rows, which also bounds
the ``OFFSET`` of the deepest page; narrow the list with filters to go further.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.core.paginator import Paginator

from kathikon.storage import reports


class EstimatedCountPaginator(Paginator):
    CAP = 10_000

    @cached_property
    def total(self) -> tuple[int, bool]:
        """``(count, exact)``: the number of rows, or an estimate / lower bound."""
        query: Any = self.object_list
        if not query.query.where:
            estimate = reports.estimated_job_count()
            if estimate is not None and estimate > self.CAP:
                return estimate, False
        counted = reports.capped_count(query, self.CAP)
        return counted, counted <= self.CAP

    @cached_property
    def count(self) -> int:  # type: ignore[override]
        return min(self.total[0], self.CAP)

    @property
    def display_count(self) -> str:
        count, exact = self.total
        if exact:
            return f"{count:,}"
        if count > self.CAP + 1:
            return f"about {count:,}"
        return f"more than {self.CAP:,}"

    def page_kwargs(self) -> dict[str, Any]:
        return {"count": self.count, "display": self.display_count}
