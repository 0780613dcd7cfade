"""The async API twins: same arguments, results and errors as the sync functions."""

from __future__ import annotations

import inspect

import pytest
from asgiref.sync import async_to_sync

import kathikon
from kathikon import aapi, api, runners
from kathikon.testing import drain_queue
from tests import workers


def test_every_public_function_has_an_async_twin():
    for name in aapi.__all__:
        assert inspect.iscoroutinefunction(getattr(kathikon, name)), name
        assert getattr(kathikon, name) is getattr(aapi, name)
        assert name[1:] in api.__all__ + runners.__all__
    public = [*api.__all__, *runners.__all__]
    assert set(aapi.__all__) == {f"a{name}" for name in public if name != "InsertResult"}


def test_async_twins_round_trip(db):
    async def scenario():
        job = await kathikon.ainsert(workers.Succeed, {"n": 1}, queue="emails")
        many = await kathikon.ainsert_many([(workers.Succeed, {"n": 2})])
        fetched = await kathikon.afetch(job.id.hex)
        status = await kathikon.astatus(job.id)
        await kathikon.apause_queue("emails")
        await kathikon.aresume_queue("emails")
        cancelled = await kathikon.acancel(many.ids[0])
        again = await kathikon.aretry(many.ids[0])
        every = await kathikon.aall()
        history = await kathikon.ahistory(job.id)
        return job, many, fetched, status, cancelled, again, every, history

    job, many, fetched, status, cancelled, again, every, history = async_to_sync(scenario)()
    assert fetched == job and status["state"] == "available" and many.inserted == 1
    assert (cancelled.state, again.state) == ("cancelled", "available")
    assert len(every) == 2 and history
    assert drain_queue().completed == 2


def test_async_twins_raise_the_same_errors(db):
    with pytest.raises(kathikon.JobNotFound):
        async_to_sync(kathikon.afetch)("0" * 32)
    with pytest.raises(kathikon.InvalidJob):
        async_to_sync(kathikon.ainsert)(workers.Succeed, {"bad": object()})
