"""Models of the demo app: a log of executions that whole-process tests count."""

from __future__ import annotations

from django.db import models


class Execution(models.Model):
    """One run of a job, written by the job itself (``workers.Record``)."""

    job_id = models.CharField(max_length=32, db_index=True)
    node = models.CharField(max_length=255, blank=True, default="")
    attempt = models.IntegerField(default=0)
    at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.job_id} on {self.node}"
