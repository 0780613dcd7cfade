"""A worker module that raises at import (a deploy mistake): its jobs must fail, not wedge."""

from __future__ import annotations

import kathikon

raise RuntimeError("poison_import cannot be imported")


class Never(kathikon.Worker):  # pragma: no cover - the module never finishes importing
    def perform(self, job):
        return None
