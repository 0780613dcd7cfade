"""Transactional completion: a job completes itself in the same transaction as its writes.

    def perform(self, job):
        with transaction.atomic():
            Invoice.objects.create(order_id=job.args["order"])
            kathikon.complete_in_transaction(job, {"invoiced": True})

Both commit or neither does: a job whose effects are only database writes runs
once even if its worker dies right after the commit (the row is completed, so
no rescue runs it again). The runtime's later ack of this attempt is skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kathikon import conf
from kathikon.exceptions import InvalidJob, InvalidState, UnstorableOutcome
from kathikon.states import EXECUTING_STATES, JobState
from kathikon.storable import storable_result
from kathikon.storage import vendor
from kathikon.storage.completion import complete_in_transaction as write_completion

if TYPE_CHECKING:
    from kathikon.models import Job


def complete_in_transaction(job: Job, result: Any = None) -> None:
    """Complete ``job`` (being performed) in the current transaction of Kathikon's database.

    ``InvalidState`` if the job is not executing in this attempt any more (rescued,
    cancelled, completed already): raised inside your ``atomic()`` block, it rolls
    your writes back too. ``InvalidJob`` (``key="result"``) if ``result`` could not be
    stored (the rule for a result ``perform`` returns, kathikon.storable: JSON, no NUL
    nor lone surrogate, nested at most ``MAX_RESULT_DEPTH`` deep, at most
    ``MAX_RESULT_BYTES``). It is a typed error, not the marker a returned result gets:
    it is raised before any SQL, so your transaction stays usable (catch it and
    complete with another result), and if you let it propagate your writes roll back
    with it, so the attempt that fails did nothing and its retry does the work once.
    """
    if job.state not in EXECUTING_STATES or job.completed_in_transaction:
        raise InvalidState(f"job {job.id.hex} is {job.state}: only a job being performed "
                           "can complete itself", state=job.state)
    if conf.result_storage() != "store":
        result = None
    elif result is not None:
        try:  # the same rule as a returned result, checked before the caller's write
            result = storable_result(result)
        except UnstorableOutcome as exc:
            raise InvalidJob(str(exc), key="result") from None
    now = vendor.now()

    def committed() -> None:
        job.state, job.completed_at, job.result = JobState.COMPLETED, now, result
        job.completed_in_transaction = True

    if not write_completion(job, result, now, committed):
        raise InvalidState(f"job {job.id.hex}: this attempt was fenced off (rescued or "
                           "changed since its claim); nothing was completed", state=job.state)
