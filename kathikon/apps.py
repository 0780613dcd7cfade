"""Django app config: ``ready()`` imports the checks and signal receivers only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.apps import AppConfig

if TYPE_CHECKING:
    from kathikon.models import Job


class KathikonConfig(AppConfig):
    name = "kathikon"
    verbose_name = "Kathikon"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kathikon import checks  # noqa: F401  (registers the system checks)

    def build_job(self, worker: Any, args: Any, options: dict[str, Any]) -> Job:
        """``Job.build``: the spec builder's unsaved job (``InvalidJob`` names a bad key)."""
        from kathikon.jobspec import build_row

        return build_row(worker, args, options).to_job()
