"""Internal: a Django ``@task`` as a workflow step (the Tasks backend's job, its payload)."""

from __future__ import annotations

from typing import Any

from kathikon.exceptions import InvalidJob


def as_step_spec(worker: Any, args: Any,
                 options: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """``(worker, args, options)`` to insert: unchanged for a Worker, or the job that
    ``task.enqueue(**args)`` would insert for a Django Task, ``args`` its kwargs."""
    if not (hasattr(worker, "module_path") and hasattr(worker, "get_backend")):
        return worker, args, options
    backend = worker.get_backend()
    job_spec = getattr(backend, "job_spec", None)
    if job_spec is None:
        raise InvalidJob(f"task {worker.module_path} uses the {type(backend).__name__} backend; "
                         "a workflow step needs kathikon.backends.KathikonBackend", key="worker")
    if args is not None and not isinstance(args, dict):
        raise InvalidJob("a task step's args are its keyword arguments: a dict", key="args")
    task_worker, payload, task_options = job_spec(worker, (), args or {})
    meta = {**(options.get("meta") or {}), **task_options["meta"]}  # the backend's keys win
    return task_worker, payload, {**task_options, **options, "meta": meta}
