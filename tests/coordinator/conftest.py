"""Fixtures of the coordinator tests: the same store tests run on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import uuid

import pytest

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _postgres(statement: str) -> None:
    import sqlalchemy

    from htda.coordinator.store import with_driver

    engine = sqlalchemy.create_engine(with_driver(POSTGRES_URL))
    try:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(statement))
    finally:
        engine.dispose()


def _postgres_unreachable() -> str | None:
    try:
        _postgres("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means: no server to test against
        return f"PostgreSQL at {POSTGRES_URL} unreachable: {str(exc).splitlines()[0]}"
    return None


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request, tmp_path):
    """``(url, schema)`` of an empty database: a SQLite file, or a fresh schema on PostgreSQL (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'coordinator.db'}", None
        return
    reason = _postgres_unreachable()
    if reason and os.environ.get("CI"):  # scripts/start-postgres provides it: a skip under CI hides a gap
        pytest.fail(f"CI: the PostgreSQL tests cannot run: {reason}", pytrace=False)
    if reason:
        pytest.skip(reason)
    schema = f"htda_test_{uuid.uuid4().hex[:12]}"
    yield POSTGRES_URL, schema
    _postgres(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def store(database):
    from htda.coordinator.store import Store

    s = Store(*database)
    yield s
    s.close()
