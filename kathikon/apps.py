"""Django app config: ``ready()`` registers the checks and loads the enqueue path."""

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
        # checks registers the system checks. api: the enqueue path (``kathikon.insert`` →
        # storage) loads with the app, not inside the first request or task that enqueues;
        # that import costs ~15 ms, and ~50 ms where no bytecode cache can be written
        # (PYTHONDONTWRITEBYTECODE, read-only images). ``import kathikon`` alone stays
        # light (see kathikon/__init__.py).
        from kathikon import api, checks  # noqa: F401

    def build_job(self, worker: Any, args: Any, options: dict[str, Any]) -> Job:
        """``Job.build``: the spec builder's unsaved job (``InvalidJob`` names a bad key)."""
        from kathikon.jobspec import build_row

        return build_row(worker, args, options).to_job()

    def dep_results(self, job: Job) -> dict[str, Any]:
        """``Job.dep_results``: the results of a workflow step's dependencies, one query."""
        from kathikon.storage.workflows import dep_results

        return dep_results(job)
