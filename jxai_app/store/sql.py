"""Hand-written statements for the send path (issue 4: time to first token).

Before a turn's model request a send runs about nine statements (lock the conversation,
the admission's three or four, claim the conversation, read the history, save the two
messages). The database answers each in ~0.01–0.03 ms; building them through the ORM took
0.15–0.45 ms apiece (query cloning, compiling, converters), most of the send's time. The
statements here are the same SQL written once, with names taken from the models' ``_meta``
(so a renamed table or column follows) and every value adapted by its model field
(``get_db_prep_save``/``get_db_prep_value``: UUIDs as hex on SQLite, aware datetimes, JSON
``None`` as SQL ``NULL``), on Django's own connection (same transaction, same wrappers).
Rows that become model instances go through ``Manager.raw``, which applies the fields'
converters. Everything else keeps using the ORM.

Only plain SQL that SQLite and PostgreSQL both accept; row locks (``FOR UPDATE``) are
added where the database has them (:func:`locking`), as the ORM's ``select_for_update``
does, and left out on SQLite, whose ``IMMEDIATE`` transaction holds the write lock.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, models

__all__ = ["column", "execute", "locking", "name", "save_value", "table", "value"]


def name(identifier: str) -> str:
    """``identifier`` quoted for the database (a table, column or alias)."""
    return str(connection.ops.quote_name(identifier))


def table(model: type[models.Model]) -> str:
    """The model's quoted table name."""
    return name(model._meta.db_table)


def column(model: type[models.Model], field: str) -> str:
    """The quoted column of ``model.field`` (``"owner"`` gives ``"owner_id"``)."""
    return name(model._meta.get_field(field).column)  # type: ignore[union-attr]


def value(model: type[models.Model], field: str, data: Any) -> Any:
    """``data`` as the database compares it with ``model.field`` (a lookup parameter)."""
    return model._meta.get_field(field).get_db_prep_value(data, connection)  # type: ignore[union-attr]


def save_value(model: type[models.Model], field: str, data: Any) -> Any:
    """``data`` as the database stores it in ``model.field`` (an INSERT/UPDATE parameter)."""
    return model._meta.get_field(field).get_db_prep_save(data, connection)  # type: ignore[union-attr]


def locking(of: str | None = None, *, no_key: bool = False) -> str:
    """The row-lock clause for the end of a SELECT: ``FOR [NO KEY] UPDATE [OF of]`` where
    the database supports it (PostgreSQL), ``""`` where it has no row locks (SQLite).

    Args:
        of: lock only this table or alias of the query (the others are not locked).
        no_key: ``NO KEY UPDATE`` (rows that merely reference the locked one stay free).
    """
    features = connection.features
    if not features.has_select_for_update:
        return ""
    clause = " FOR NO KEY UPDATE" if no_key and features.has_select_for_no_key_update else " FOR UPDATE"
    return clause + (f" OF {of}" if of and features.has_select_for_update_of else "")


def execute(sql: str, params: list[Any]) -> tuple[list[tuple[Any, ...]], int]:
    """Run one statement; its rows (``[]`` for none) and its row count."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = list(cursor.fetchall()) if cursor.description else []
        return rows, cursor.rowcount
