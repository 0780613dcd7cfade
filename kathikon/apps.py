"""Django app config: ``ready()`` imports the checks and signal receivers only."""

from __future__ import annotations

from django.apps import AppConfig


class KathikonConfig(AppConfig):
    name = "kathikon"
    verbose_name = "Kathikon"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kathikon import checks  # noqa: F401  (registers the system checks)
