"""Hand-written statements for migrations that must differ by database: PostgreSQL builds and drops
indexes CONCURRENTLY, so a large table is never locked for long; SQLite (the embedded mode) cannot."""

from collections.abc import Callable
from typing import Any


def run_by_vendor(postgresql: list[str], sqlite: list[str]) -> Callable[[Any, Any], None]:
    """A RunPython function executing `postgresql` or `sqlite`, whichever the connection is."""

    def run(apps: Any, schema_editor: Any) -> None:
        statements = postgresql if schema_editor.connection.vendor == "postgresql" else sqlite
        for statement in statements:
            schema_editor.execute(statement)

    return run
