"""settings.KATHIKON: readers and system checks."""

from __future__ import annotations

import math

import pytest
from django.core.exceptions import ImproperlyConfigured

from kathikon import conf
from kathikon.checks import check_settings


def ids(settings_value, settings):
    settings.KATHIKON = settings_value
    return sorted({message.id for message in check_settings()})


def test_defaults_and_readers(settings):
    settings.KATHIKON = {}
    assert conf.queues() == {"default": {"concurrency": 10}}
    assert conf.queue_names() == ["default"]
    assert conf.concurrency("default") == 10
    assert conf.poll_interval() == 1.0
    assert conf.scheduler_interval() == 1.0
    assert conf.prune_interval() == 60
    assert conf.retention_period() == 7 * 86400
    assert conf.max_attempts() == 20
    assert conf.timezone() == "UTC"
    assert conf.result_storage() == "store"
    assert conf.database() == "default"
    assert conf.heartbeat_interval() == 5
    assert conf.rescue_after() == 60
    assert conf.shutdown_grace_period() == 30
    assert conf.cron() == []
    assert check_settings() == []


def test_readers_follow_override_settings(settings):
    settings.KATHIKON = {"QUEUES": {"emails": {"concurrency": 3}, "default": {}},
                         "TIMEZONE": "Europe/Berlin", "POLL_INTERVAL": 0.2}
    assert conf.concurrency("emails") == 3
    assert conf.concurrency("default") == 10
    assert conf.queue_config("emails") == {"concurrency": 3}
    assert conf.timezone() == "Europe/Berlin"
    assert conf.poll_interval() == 0.2


@pytest.mark.parametrize(("value", "expected"), [
    ([], ["kathikon.E001"]),
    ({"QUEUS": {}}, ["kathikon.E002"]),
    ({"QUEUES": {}}, ["kathikon.E003"]),
    ({"QUEUES": {"bad name": {}}}, ["kathikon.E003"]),
    ({"QUEUES": {"q": {"concurrency": 0}}}, ["kathikon.E003"]),
    ({"QUEUES": {"q": {"concurency": 2}}}, ["kathikon.E003"]),
    ({"QUEUES": {"q": 5}}, ["kathikon.E003"]),
    ({"POLL_INTERVAL": 0}, ["kathikon.E004"]),
    ({"POLL_INTERVAL": "1"}, ["kathikon.E004"]),
    ({"SHUTDOWN_GRACE_PERIOD": -1}, ["kathikon.E004"]),
    # Durations that overflow a float, a timer or date arithmetic at run time.
    ({"POLL_INTERVAL": 10**400}, ["kathikon.E004"]),
    ({"POLL_INTERVAL": math.nan}, ["kathikon.E004"]),
    ({"RETENTION_PERIOD": 1e300}, ["kathikon.E004"]),
    ({"SHUTDOWN_GRACE_PERIOD": math.inf}, ["kathikon.E004"]),
    ({"MAX_ATTEMPTS": 0}, ["kathikon.E005"]),
    ({"MAX_ATTEMPTS": 10**5000}, ["kathikon.E005"]),  # too long for repr() in the message
    ({"RESULT_STORAGE": "keep"}, ["kathikon.E006"]),
    ({"TIMEZONE": "Mars/Olympus"}, ["kathikon.E007"]),
    ({"TIMEZONE": "A" * 300}, ["kathikon.E007"]),  # zoneinfo's OSError: name too long
    ({"TIMEZONE": "Europe"}, ["kathikon.E007"]),  # a folder of tzdata
    ({"DATABASE": "jobs"}, ["kathikon.E008"]),
    ({"RESCUE_AFTER": 5, "HEARTBEAT_INTERVAL": 10}, ["kathikon.E009"]),
    ({"CRON": "0 * * * *"}, ["kathikon.E010"]),
    ({"TESTING_MODE": "eager"}, ["kathikon.E011"]),
    ({"ALLOW_DESTRUCTIVE_ACTIONS": "no"}, ["kathikon.E012"]),
    ({"PREPARED_STATEMENTS": 0}, ["kathikon.E014"]),
])
def test_bad_settings_are_reported_with_ids_and_hints(settings, value, expected):
    assert ids(value, settings) == expected
    settings.KATHIKON = value
    assert all(message.hint for message in check_settings())


def test_the_longest_durations_are_accepted(settings):
    settings.KATHIKON = {"RETENTION_PERIOD": conf.MAX_SECONDS, "SHUTDOWN_GRACE_PERIOD": 0}
    assert conf.retention_period() == 100 * 365 * 86400


def test_readers_refuse_bad_settings(settings):
    settings.KATHIKON = {"MAX_ATTEMPTS": -1}
    with pytest.raises(ImproperlyConfigured, match=r"kathikon\.E005"):
        conf.max_attempts()


@pytest.mark.django_db
def test_manage_py_check_reports_the_problem(settings):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    settings.KATHIKON = {"QUEUES": {"x y": {}}}
    with pytest.raises(SystemCheckError, match=r"kathikon\.E003"):
        call_command("check")
