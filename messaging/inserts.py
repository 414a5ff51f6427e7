"""What an ORM INSERT would write, for the few writes done as one hand-written statement on
PostgreSQL (the accept path, received mail): the same columns and the same values as
`Model.save()`, defaults, auto_now and JSON adaptation included."""

from typing import Any

from django.db import connection
from django.db.models import Field, Model


def insert_fields(model: type[Model], *, exclude: frozenset[str] = frozenset()) -> list[Field]:
    """The columns an INSERT of `model` writes: every concrete field but the generated id and `exclude`."""
    return [field for field in model._meta.concrete_fields if not field.primary_key and field.name not in exclude]


def insert_values(instance: Model, fields: list[Field]) -> list[Any]:
    """The values an INSERT of `instance` would send for `fields`, in that order."""
    return [field.get_db_prep_save(field.pre_save(instance, add=True), connection) for field in fields]
