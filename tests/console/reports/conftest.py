"""One local SparkSession for the whole reports test group, and row builders."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from console.reports.jobs.session import get_session

    session = get_session("local[2]", driver_memory="1g")
    yield session
    session.stop()


def rec(
    topic,
    *,
    queue_id=0,
    queue_offset=0,
    physical_offset=0,
    sysflag=0,
    born_ts=0,
    store_ts=0,
    body_size=1,
    prepared_offset=0,
    tags=None,
    keys=None,
    props=None,
):
    """Return one record row in ``RECORD_SCHEMA`` order."""
    return (
        topic,
        queue_id,
        queue_offset,
        physical_offset,
        sysflag,
        born_ts,
        store_ts,
        body_size,
        prepared_offset,
        tags,
        keys,
        props or {},
    )


@pytest.fixture
def records(spark):
    """Build a records DataFrame from ``rec`` rows."""
    from console.reports.jobs.common import RECORD_SCHEMA

    def build(rows):
        return spark.createDataFrame(rows, RECORD_SCHEMA)

    return build
