"""Plain-SQL reads for the hot paths, on the engine's pooled DBAPI connection.

One record read through the ORM (a session, its identity map, the type processors) costs about
20 times the same read by SQL, and the calls a user waits on (exec, a pool's claim, a create)
read sandbox, template and key records on the event loop. Repositories that read on those paths
select by SQL here and decode what the ORM's column types would (``json_or`` for JSON text,
``flag`` for booleans stored as 0/1); their writes stay on the ORM unless said otherwise, and
those that do not go through ``transaction``: committed whole (durably, as every write) or
rolled back whole, the connection back in the pool either way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine.interfaces import DBAPICursor

from corral.timing import phase

__all__ = ["fetch_all", "flag", "json_or", "transaction"]


def fetch_all(engine: Engine, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows ``sql`` selects, read on a pooled connection that goes back at once."""
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        try:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
        finally:
            cursor.close()
    finally:
        connection.close()  # back to the pool


@contextlib.contextmanager
def transaction(engine: Engine, *, immediate: bool = False) -> Iterator[DBAPICursor]:
    """A cursor on a pooled connection whose writes commit when the block ends (timed as the
    ``db commit`` phase) and roll back if it raises, whatever it raises; ``immediate`` takes
    the write lock at once (``BEGIN IMMEDIATE``: a read then a write in the block sees no other
    writer between them)."""
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        try:
            if immediate:
                cursor.execute("BEGIN IMMEDIATE")
            yield cursor
        finally:
            cursor.close()
        with phase("db commit"):
            connection.commit()
    except BaseException:
        connection.rollback()
        raise
    finally:
        connection.close()  # back to the pool


def json_or(text: str | None, empty: Any) -> Any:
    """A JSON column's value as the ORM reads it, ``empty`` for SQL NULL or JSON null."""
    value = json.loads(text) if text is not None else None
    return empty if value is None else value


def flag(value: int | None) -> bool | None:
    """A Boolean column's value as the ORM reads it (None stays None)."""
    return None if value is None else bool(value)
