"""What an ORM INSERT would write, for the few writes done as one hand-written statement on
PostgreSQL (the accept path, received mail): the same columns and the same values as
`Model.save()`, defaults, auto_now and JSON adaptation included."""

from typing import Any

from django.db import connection
from django.db.models import Field, Model


def insert_fields(
    model: type[Model], *, exclude: frozenset[str] = frozenset(), only: tuple[str, ...] | None = None
) -> list[Field]:
    """The columns an INSERT of `model` writes: every concrete field but the generated id and `exclude`
    (or just the fields named in `only`, in that order)."""
    if only is not None:
        by_name = {field.name: field for field in model._meta.concrete_fields}
        return [by_name[name] for name in only]
    return [field for field in model._meta.concrete_fields if not field.primary_key and field.name not in exclude]


def column_of(model: type[Model], name: str) -> str:
    """The column of a concrete field of `model` (never a reverse relation, which has none)."""
    field = model._meta.get_field(name)
    assert isinstance(field, Field) and field.column is not None, name
    return field.column


def insert_columns(fields: list[Field]) -> list[str]:
    """The quoted columns of `fields`, in that order."""
    quote = connection.ops.quote_name
    return [quote(field.column) for field in fields if field.column is not None]


def insert_values(instance: Model, fields: list[Field]) -> list[Any]:
    """The values an INSERT of `instance` would send for `fields`, in that order."""
    return [field.get_db_prep_save(field.pre_save(instance, add=True), connection) for field in fields]
