"""kathikon.storage.literals: the array literals PostgreSQL reads back as the values sent."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from kathikon.storage.literals import array, int_array, uuid_array


def test_literals_are_one_string_of_the_values():
    ids = [uuid.UUID(int=1), uuid.UUID(int=255)]
    assert uuid_array(ids) == "{" + f"{1:032x},{255:032x}" + "}"
    assert int_array([3, -1, 0]) == "{3,-1,0}"
    assert array([]) == "{}"


@pytest.mark.django_db
def test_postgresql_reads_them_back():
    if connection.vendor != "postgresql":
        pytest.skip("array literals are PostgreSQL's")
    ids = [uuid.uuid4() for _ in range(3)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::uuid[], %s::bigint[]", [uuid_array(ids), int_array([7, 2**40])])
        assert cursor.fetchone() == (ids, [7, 2**40])
