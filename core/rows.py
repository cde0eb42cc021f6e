"""Rows written on a chat turn's hot path without the ORM's per-call query compilation.

`Model.objects.for_account(a).create(...)` builds a filtered queryset, then compiles an
INSERT from scratch every time: about 0.8 ms of a web process's CPU for one chat message,
several times what PostgreSQL spends storing it (docs/benchmarks.md, Chat). `insert()` writes
the same row with an INSERT built once per model from the model's own fields, and each value
converted by its field (`pre_save` for auto_now dates, `get_db_prep_save` for JSON and
dates), so the row is what `create()` would have written. Neither signals nor `save()` run:
the models written here have no receivers and no save() of their own (a test says so).
"""

from __future__ import annotations

import functools

from django.db import DEFAULT_DB_ALIAS, connection


@functools.cache
def _insert_plan(model) -> tuple[str, tuple]:
    meta = model._meta
    fields = tuple(f for f in meta.concrete_fields if not f.primary_key)
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {quote(meta.pk.column)}"
    )
    return sql, fields


def insert(model, /, **values):
    """A new row of `model` (a tenant model: `account_id` among `values`; `model` is
    positional-only, as a model may have a field of that name), returned as the saved instance. Runs in the caller's transaction and account context (row-level security
    checks the account as for any insert)."""
    if "account_id" not in values and "account" not in values:
        raise ValueError(f"insert({model.__name__}) needs the row's account")
    obj = model(**values)
    sql, fields = _insert_plan(model)
    params = [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        obj.pk = cursor.fetchone()[0]
    obj._state.adding = False
    obj._state.db = DEFAULT_DB_ALIAS
    return obj


@functools.cache
def _columns(model) -> tuple[str, tuple[str, ...]]:
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    return ", ".join(f"t.{quote(f.column)}" for f in fields), tuple(f.attname for f in fields)


@functools.cache
def _select_plan(model, related: tuple[str, ...]) -> tuple[str, list]:
    """SELECT … FROM the model's table `t` LEFT JOIN each related table under the foreign
    key's own name, and how to cut a row into instances: [(field or None, model, names, width)]."""
    quote = connection.ops.quote_name
    columns, names = _columns(model)
    parts, joins = [columns], []
    plan = [(None, model, names, len(names))]
    for name in related:
        field = model._meta.get_field(name)
        target = field.related_model
        fields = target._meta.concrete_fields
        parts.append(", ".join(f"{quote(name)}.{quote(f.column)}" for f in fields))
        joins.append(
            f"LEFT JOIN {quote(target._meta.db_table)} {quote(name)} "
            f"ON {quote(name)}.{quote(target._meta.pk.column)} = t.{quote(field.column)}"
        )
        plan.append((field, target, tuple(f.attname for f in fields), len(fields)))
    sql = f"SELECT {', '.join(parts)} FROM {quote(model._meta.db_table)} t {' '.join(joins)}"
    return sql, plan


def select_one(model, where: str, params: list, *, related: tuple[str, ...] = ()):
    """The first row of `model` (table alias `t`) that `where` selects ("WHERE …", or
    "JOIN … WHERE …", with %s placeholders), as an instance loaded like a queryset's
    (`from_db`), or None. `related`: foreign keys loaded with it, as `select_related` does
    (each joined under its own name, so `where` may test `account.deleted_at`). For a hot
    path's fixed lookup; the caller's account context applies (row-level security)."""
    sql, plan = _select_plan(model, tuple(related))
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} {where} LIMIT 1", params)
        row = cursor.fetchone()
    if row is None:
        return None
    obj, start = None, 0
    for field, target, names, width in plan:
        values = row[start : start + width]
        start += width
        if field is None:
            obj = target.from_db(DEFAULT_DB_ALIAS, names, values)
        else:  # a null foreign key joins nothing: cached as None, like select_related
            pk_at = names.index(target._meta.pk.attname)
            field.set_cached_value(
                obj, None if values[pk_at] is None else target.from_db(DEFAULT_DB_ALIAS, names, values)
            )
    return obj


@functools.cache
def _update_sql(model, names: tuple[str, ...]) -> tuple[str, tuple]:
    meta = model._meta
    fields = tuple(meta.get_field(name) for name in names)
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(f.column)} = %s" for f in fields)
    return f"UPDATE {quote(meta.db_table)} SET {sets} WHERE {quote(meta.pk.column)} = %s AND account_id = %s", fields


def update(model, /, *, pk, account_id: int, **values) -> int:
    """Set `values` on one row of `model` (by pk, in `account_id`); the number of rows changed."""
    sql, fields = _update_sql(model, tuple(values))
    params = [field.get_db_prep_save(values[field.name], connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, pk, account_id])
        return cursor.rowcount
