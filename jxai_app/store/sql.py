"""Hand-written statements for the send path (issue 4: time to first token).

Before a turn's model request a send runs about nine statements (lock the conversation,
the admission's three or four, claim the conversation, read the history, save the two
messages). The database answers each in ~0.01–0.03 ms; building them through the ORM took
0.15–0.45 ms apiece (query cloning, compiling, converters), most of the send's time. The
statements here are the same SQL written once, with names taken from the models' ``_meta``
(so a renamed table or column follows) and every value adapted by its model field
(``get_db_prep_save``/``get_db_prep_value``: UUIDs as hex on SQLite, aware datetimes, JSON
``None`` as SQL ``NULL``), on Django's own connection (same transaction, same wrappers).
Rows that become model instances are converted by the fields' own converters, as the ORM
converts them (:func:`instances`). Everything else keeps using the ORM.

Only plain SQL that SQLite and PostgreSQL both accept; row locks (``FOR UPDATE``) are
added where the database has them (:func:`locking`), as the ORM's ``select_for_update``
does, and left out on SQLite, whose ``IMMEDIATE`` transaction holds the write lock. Each
statement's text is built once per database vendor (:func:`statement`); only the values
change between calls.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models

__all__ = [
    "column", "columns", "execute", "fetch_together", "insert", "insert_statement", "instances", "locking", "name",
    "rows_to_instances", "save_value", "set_keys", "statement", "table", "value",
]


def _db() -> Any:
    """The default database's connection wrapper of this thread (one lookup: the module
    level ``django.db.connection`` proxy looks it up again on every attribute)."""
    return connections[DEFAULT_DB_ALIAS]


def statement(build: Callable[..., str]) -> Callable[..., str]:
    """Decorator: ``build(*key)`` (hashable arguments) returns a statement's text; it runs
    once per database vendor and key, later calls return the remembered text."""
    remembered = functools.cache(lambda vendor, *key: build(*key))

    @functools.wraps(build)
    def text(*key: Any) -> str:
        return str(remembered(_db().vendor, *key))

    return text


def name(identifier: str) -> str:
    """``identifier`` quoted for the database (a table, column or alias)."""
    return str(_db().ops.quote_name(identifier))


def table(model: type[models.Model]) -> str:
    """The model's quoted table name."""
    return name(model._meta.db_table)


def column(model: type[models.Model], field: str) -> str:
    """The quoted column of ``model.field`` (``"owner"`` gives ``"owner_id"``)."""
    return name(model._meta.get_field(field).column)


def columns(model: type[models.Model]) -> str:
    """Every concrete column of the model, quoted, comma-separated (what ``Manager.raw``
    needs to build whole instances)."""
    return ", ".join(name(f.column) for f in model._meta.concrete_fields)


def value(model: type[models.Model], field: str, data: Any) -> Any:
    """``data`` as the database compares it with ``model.field`` (a lookup parameter)."""
    return model._meta.get_field(field).get_db_prep_value(data, _db())


def save_value(model: type[models.Model], field: str, data: Any) -> Any:
    """``data`` as the database stores it in ``model.field`` (an INSERT/UPDATE parameter)."""
    return model._meta.get_field(field).get_db_prep_save(data, _db())


def locking(of: str | None = None, *, no_key: bool = False) -> str:
    """The row-lock clause for the end of a SELECT: ``FOR [NO KEY] UPDATE [OF of]`` where
    the database supports it (PostgreSQL), ``""`` where it has no row locks (SQLite).

    Args:
        of: lock only this table or alias of the query (the others are not locked).
        no_key: ``NO KEY UPDATE`` (rows that merely reference the locked one stay free).
    """
    features = _db().features
    if not features.has_select_for_update:
        return ""
    clause = " FOR NO KEY UPDATE" if no_key and features.has_select_for_no_key_update else " FOR UPDATE"
    return clause + (f" OF {of}" if of and features.has_select_for_update_of else "")


def execute(sql: str, params: Sequence[Any]) -> tuple[list[tuple[Any, ...]], int]:
    """Run one statement; its rows (``[]`` for none) and its row count."""
    with _db().cursor() as cursor:
        cursor.execute(sql, params)
        rows = list(cursor.fetchall()) if cursor.description else []
        return rows, cursor.rowcount


_Converters = list[tuple[int, list[Any], Any]]
_converters: weakref.WeakKeyDictionary[Any, dict[type[models.Model], _Converters]] = weakref.WeakKeyDictionary()


def _converters_of(db: Any, model: type[models.Model]) -> _Converters:
    """``[(index, converters, column expression)]`` for the model's concrete columns that
    need converting on ``db`` (the compiler's ``get_converters``), remembered per connection."""
    known = _converters.setdefault(db, {})
    if model not in known:
        found: _Converters = []
        for index, field in enumerate(model._meta.concrete_fields):
            expression = field.get_col(model._meta.db_table)
            steps = db.ops.get_db_converters(expression) + expression.get_db_converters(db)
            if steps:
                found.append((index, steps, expression))
        known[model] = found
    return known[model]


def fetch_together(statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
    """Run ``[(sql, params), …]`` in order, in the current transaction, and return each one's
    rows (``[]`` for a statement without rows).

    On PostgreSQL they travel as **one** query (psycopg's client-side binding, Django's
    default, sends several statements in one message and returns one result per statement,
    read with ``nextset``): one round trip instead of one per statement, with the same
    semantics (each statement runs after the previous one; a lock taken by one holds for the
    next). Elsewhere, or with server-side binding, they run one after another.
    """
    db = _db()
    if len(statements) > 1 and db.vendor == "postgresql":
        with db.cursor() as cursor:
            if _client_side_binding(cursor):
                cursor.execute(";\n".join(text for text, _ in statements),
                               [param for _, params in statements for param in params])
                results = [list(cursor.fetchall()) if cursor.description else []]
                while cursor.nextset():
                    results.append(list(cursor.fetchall()) if cursor.description else [])
                return results
    return [execute(text, params)[0] for text, params in statements]


def _client_side_binding(cursor: Any) -> bool:
    import psycopg

    return isinstance(cursor.cursor, psycopg.ClientCursor)


def instances(model: type[models.Model], sql: str, params: Sequence[Any]) -> list[Any]:
    """Run a SELECT of :func:`columns` (every concrete column, in the model's order) and
    return the rows as model instances, each value converted as the ORM converts it (UUIDs,
    datetimes, JSON, booleans …): ``Manager.raw`` without its per-query set-up."""
    rows, _ = execute(sql, params)
    return rows_to_instances(model, rows)


def rows_to_instances(model: type[models.Model], rows: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Rows of a SELECT of :func:`columns` as model instances (see :func:`instances`)."""
    if not rows:
        return []
    db = _db()
    converters = _converters_of(db, model)
    names = [f.attname for f in model._meta.concrete_fields]
    out = []
    for row in rows:
        values = list(row)
        for index, steps, expression in converters:
            for step in steps:
                values[index] = step(values[index], expression, db)
        out.append(model.from_db(db.alias, names, values))
    return out


@statement
def _insert(model: type[models.Model], count: int) -> str:
    meta = model._meta
    fields = [f for f in meta.concrete_fields if f is not meta.auto_field]
    marks = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return (f"INSERT INTO {table(model)} ({', '.join(name(f.column) for f in fields)}) "
            f"VALUES {', '.join([marks] * count)} RETURNING {name(meta.auto_field.column)}")


def insert_statement(objects: Sequence[models.Model]) -> tuple[str, list[Any]] | None:
    """The ``INSERT … RETURNING`` of new instances of one model, to run alone or with other
    statements (:func:`fetch_together`); pass its rows to :func:`set_keys`.

    Every concrete field but the auto primary key is written, its value taken as
    ``bulk_create`` takes it (``pre_save``: ``auto_now``/``auto_now_add`` stamp the
    instance).

    Returns:
        ``(sql, params)``, or ``None`` where this cannot be done in one statement (no auto
        primary key, a database that cannot return the new keys, a value that is an
        expression such as a ``db_default``): then use :func:`insert`.
    """
    model = type(objects[0])
    meta = model._meta
    db = _db()
    fields = [f for f in meta.concrete_fields if f is not meta.auto_field]
    params = [f.get_db_prep_save(f.pre_save(obj, True), db) for obj in objects for f in fields]
    if (meta.auto_field is None or not db.features.can_return_rows_from_bulk_insert
            or any(hasattr(v, "as_sql") for v in params)):
        return None
    return _insert(model, len(objects)), params


def set_keys(objects: Sequence[models.Model], rows: Sequence[tuple[Any, ...]]) -> None:
    """Give the instances of :func:`insert_statement` the keys its rows returned (saved
    instances from now on, as after ``save()``)."""
    alias = _db().alias
    for obj, (key,) in zip(objects, rows, strict=True):
        obj.pk = key
        obj._state.adding = False
        obj._state.db = alias


def insert(objects: Sequence[models.Model]) -> None:
    """Save new instances of one model in one ``INSERT … RETURNING`` (what ``bulk_create``
    does, without its query building) and set their primary keys; ``bulk_create`` where
    :func:`insert_statement` cannot do it."""
    if not objects:
        return
    prepared = insert_statement(objects)
    if prepared is None:
        type(objects[0])._default_manager.bulk_create(objects)
        return
    set_keys(objects, execute(*prepared)[0])
