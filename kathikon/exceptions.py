"""Kathikon's typed errors: every public function raises one of these."""

from __future__ import annotations


class KathikonError(Exception):
    """Base class for Kathikon errors."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class InvalidJob(KathikonError, ValueError):
    """The job's worker, args or options are invalid."""

    def __init__(self, message: str | None = None, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class JobNotFound(KathikonError, LookupError):
    """No job has that id."""


class JobExecuting(KathikonError):
    """The job is claimed or running and cannot be changed now."""


class InvalidState(KathikonError):
    """The job is in a state that does not allow this operation."""

    def __init__(self, message: str | None = None, *, state: str | None = None) -> None:
        super().__init__(message)
        self.state = state


class NotMigrated(KathikonError):
    """Kathikon's tables are missing or out of date: run ``python manage.py migrate``."""

    #: What ``kathikon_worker`` exits with (sysexits' EX_CONFIG); its supervisor does not
    #: restart a worker that exited so.
    exit_code = 78


class StaleLease(KathikonError):
    """The job was rescued or changed since it was claimed; the outcome was not written."""


class InvalidQueue(KathikonError, ValueError):
    """Queue names are 1-63 letters, digits, '_', '-' or '.'."""


class InvalidSchedule(KathikonError, ValueError):
    """The cron expression, timezone or schedule options are invalid."""


class BatchClosed(KathikonError):
    """The batch is closed and takes no more jobs."""


class BatchNotFound(KathikonError, LookupError):
    """No batch has that id."""


class WorkflowNotFound(KathikonError, LookupError):
    """No workflow has that id."""


class InvalidWorkflow(KathikonError, ValueError):
    """The workflow's steps or dependencies are invalid (a cycle, an unknown dependency, a
    step name used twice); nothing was inserted."""

    def __init__(self, message: str | None = None, *, step: str | None = None) -> None:
        super().__init__(message)
        self.step = step


class WorkflowFinished(KathikonError):
    """The workflow has finished (or was cancelled) and takes no more steps."""


class CronNotFound(KathikonError, LookupError):
    """No cron schedule has that id."""


class ActionNotAllowed(KathikonError, PermissionError):
    """Destructive operations are disabled; allow them to proceed."""


class NodeNameInUse(KathikonError):
    """Another live worker process holds this node name; one name, one live process."""


class NodeSuperseded(KathikonError):
    """Another process took over this node's name while it was silent."""


# -- failed attempts recorded by Kathikon itself (their ``kind`` in ``job.errors`` is stable) ---


class JobTimeout(KathikonError):
    """The job ran longer than its worker's ``timeout``."""


class UnstorableOutcome(KathikonError):
    """The outcome of ``perform`` cannot be stored (e.g. a result that is not JSON)."""


class TransactionLeftOpen(KathikonError):
    """``perform`` returned inside a ``transaction.atomic()`` block: its writes were rolled back."""


class ExecutorThreadDied(KathikonError):
    """The thread running the job died outside ``perform``; the attempt is failed."""


class EventLoopDied(KathikonError):
    """The worker process's event loop ended while this async job ran; it was restarted."""


class NodeVanished(KathikonError):
    """Recorded on jobs rescued from a worker process that stopped heartbeating."""


class WorkerCrashed(KathikonError):
    """Recorded on a job whose worker process died while it ran alone (the crash budget)."""


#: Persisted ``kind`` of errors recorded under an older class path → the kind recorded now.
LEGACY_KINDS = {"kathikon.executor.JobTimeout": "kathikon.JobTimeout"}


#: Failures Kathikon records itself; their ``kind`` is ``kathikon.<Name>`` whatever module
#: defines them, and each is importable from the ``kathikon`` package.
RECORDED = (JobTimeout, UnstorableOutcome, TransactionLeftOpen, ExecutorThreadDied,
            EventLoopDied, NodeVanished, WorkerCrashed)


def error_kind(exc_type: type[BaseException]) -> str:
    """The ``kind`` recorded in ``job.errors`` for an exception of ``exc_type``.

    The class path, except the failures Kathikon records itself: ``kathikon.<Name>``
    (importable from the ``kathikon`` package), so that moving a class between
    modules never changes what is stored.
    """
    if exc_type in RECORDED:
        return f"kathikon.{exc_type.__qualname__}"
    return f"{exc_type.__module__}.{exc_type.__qualname__}"


def read_kind(kind: str) -> str:
    """A stored ``kind`` as recorded today (rows written by older versions included)."""
    return LEGACY_KINDS.get(kind, kind)


def shown(value: object) -> str:
    """``repr(value)`` for an error message, even of an int too long to print.

    Python refuses to print an int of more than 4300 digits (``ValueError``), so a
    hostile ``10**5000`` would escape validation as that error instead of the typed one.
    """
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an int of {value.bit_length()} bits"
    try:
        return repr(value)
    except ValueError:  # such an int inside a dict or a list
        return f"a {type(value).__name__} holding an int too long to show"
