"""Daily range partitions of the history tables on PostgreSQL, by a timestamp: `created_at` for
messages and their events, the event's `created_at` for webhook deliveries (`subject_created_at`).

Each partitioned table has one partition per UTC day, named `<table>_pYYYYMMDD`, created a few days
ahead (`partitions_ensure`), and a DEFAULT partition `<table>_default` for rows outside every day
created (backdated rows: imports, tests). Retention drops whole day partitions (messaging.retention),
which leaves no dead tuples behind, where a DELETE of the same rows leaves millions for vacuum.

`partition_table` turns a plain table into a partitioned one online: it builds the partitioned twin,
mirrors every write into it with a trigger, copies the existing rows in short batches, then swaps
the names in one short transaction (manage.py partition_history; the migration does it at once for
a small table). The primary key becomes (id, <key>), and every unique constraint gains the
partition key, as PostgreSQL requires of a partitioned table; ids stay unique: the partitioned table's
identity sequence goes on where the plain table's stopped. No foreign key may point into the table
(a partition drop could not keep it).

SQLite, the embedded default, keeps plain tables: nothing here runs there.
"""

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

logger = logging.getLogger(__name__)

DEFAULT_PARTITION_KEY = "created_at"
_DAY_SUFFIX = re.compile(r"_p(\d{8})$")
_TWIN_SUFFIX = "_partitioned"


@dataclass(frozen=True)
class DayPartition:
    name: str
    day: date  # the rows created that UTC day

    @property
    def end(self) -> date:
        return self.day + timedelta(days=1)


def available() -> bool:
    return connection.vendor == "postgresql"


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def utc_today() -> date:
    return datetime.now(UTC).date()


def is_partitioned(table: str) -> bool:
    if not available():
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [table])
        return cursor.fetchone() is not None


def day_partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def default_partition_name(table: str) -> str:
    return f"{table}_default"


def day_partitions(table: str) -> list[DayPartition]:
    """The table's day partitions, oldest first (the DEFAULT partition is not one of them)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT child.relname FROM pg_inherits JOIN pg_class child ON child.oid = pg_inherits.inhrelid "
            "WHERE pg_inherits.inhparent = to_regclass(%s)",
            [table],
        )
        names = [row[0] for row in cursor.fetchall()]
    days = [(name, _DAY_SUFFIX.search(name)) for name in names]
    found = [DayPartition(name, datetime.strptime(match[1], "%Y%m%d").date()) for name, match in days if match]
    return sorted(found, key=lambda partition: partition.day)


def _partition_key(cursor: CursorWrapper, table: str) -> str:
    """The column the partitioned `table` is partitioned by, as the catalog has it."""
    cursor.execute(
        "SELECT attname FROM pg_partitioned_table JOIN pg_attribute ON attrelid = partrelid AND attnum = partattrs[0] "
        "WHERE partrelid = to_regclass(%s)",
        [table],
    )
    return str(cursor.fetchone()[0])


def _default_has_rows_of(cursor: CursorWrapper, table: str, day: date) -> bool:
    default = _quote(default_partition_name(table))
    key = _quote(_partition_key(cursor, table))
    cursor.execute(
        f"SELECT 1 FROM {default} WHERE {key} >= %s AND {key} < %s LIMIT 1",  # noqa: S608
        [day, day + timedelta(days=1)],
    )
    return cursor.fetchone() is not None


def _day_bounds(day: date) -> str:
    return (
        f"FOR VALUES FROM ('{day.isoformat()} 00:00:00+00') TO ('{(day + timedelta(days=1)).isoformat()} 00:00:00+00')"
    )


def _name_partition_indexes(cursor: CursorWrapper, partition: str, suffix: str) -> None:
    """Name a partition's indexes after the table's (`message_list_idx_p20261127`), so that a plan shows
    which index it reads; PostgreSQL would name them after the partition's columns."""
    cursor.execute(
        "SELECT child.relname, parent.relname FROM pg_index "
        "JOIN pg_class child ON child.oid = pg_index.indexrelid "
        "JOIN pg_inherits ON pg_inherits.inhrelid = child.oid "
        "JOIN pg_class parent ON parent.oid = pg_inherits.inhparent "
        "WHERE pg_index.indrelid = to_regclass(%s)",
        [partition],
    )
    for child, parent in cursor.fetchall():
        name = f"{parent[: 62 - len(suffix)]}_{suffix}"
        if child != name:
            cursor.execute(f"ALTER INDEX {_quote(child)} RENAME TO {_quote(name)}")


def partitions_ensure(table: str, *, days: Iterable[date]) -> list[str]:
    """Create the day partitions of `days` that do not exist yet; returns the names created.

    A day some rows of the DEFAULT partition belong to is left to the DEFAULT partition (PostgreSQL
    refuses the partition while they are there), with a warning: those rows keep the row purge."""
    existing = {partition.day for partition in day_partitions(table)}
    created = []
    for day in sorted(set(days) - existing):
        name = day_partition_name(table, day)
        with transaction.atomic(), connection.cursor() as cursor:
            if _default_has_rows_of(cursor, table, day):
                logger.warning("partitions: %s not created: the DEFAULT partition holds rows of %s", name, day)
                continue
            cursor.execute(f"CREATE TABLE {_quote(name)} PARTITION OF {_quote(table)} {_day_bounds(day)}")
            _name_partition_indexes(cursor, name, f"p{day:%Y%m%d}")
        created.append(name)
    return created


def partition_drop(name: str) -> None:
    """Drop one partition (in the caller's transaction): its rows go at once, with no dead tuples."""
    with connection.cursor() as cursor:
        # Deferred foreign-key checks of rows written earlier in the transaction must run first:
        # PostgreSQL refuses to drop a table with trigger events pending.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"DROP TABLE {_quote(name)}")


# --- turning a plain table into a partitioned one ---------------------------------------------------


def _columns(cursor: CursorWrapper, table: str) -> list[str]:
    cursor.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum",
        [table],
    )
    return [row[0] for row in cursor.fetchall()]


def _constraints(cursor: CursorWrapper, table: str, kinds: str) -> list[tuple[str, str, str]]:
    """(name, kind, definition) of the table's constraints of the kinds given (p, u, f, c)."""
    cursor.execute(
        "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = to_regclass(%s) AND contype = ANY(%s) ORDER BY conname",
        [table, list(kinds)],
    )
    return list(cursor.fetchall())


def _plain_indexes(cursor: CursorWrapper, table: str) -> list[tuple[str, str]]:
    """(name, CREATE INDEX statement) of the table's indexes that back no constraint."""
    cursor.execute(
        "SELECT index.relname, pg_get_indexdef(pg_index.indexrelid) FROM pg_index "
        "JOIN pg_class index ON index.oid = pg_index.indexrelid "
        "WHERE pg_index.indrelid = to_regclass(%s) "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conindid = pg_index.indexrelid) ORDER BY 1",
        [table],
    )
    return list(cursor.fetchall())


def _referencing(cursor: CursorWrapper, table: str) -> list[str]:
    cursor.execute(
        "SELECT conrelid::regclass::text || '.' || conname FROM pg_constraint "
        "WHERE confrelid = to_regclass(%s) AND contype = 'f'",
        [table],
    )
    return [row[0] for row in cursor.fetchall()]


def _twin_name(name: str) -> str:
    """A name for the twin's index or constraint while the original still holds the real one."""
    return f"{name[: 63 - len(_TWIN_SUFFIX)]}{_TWIN_SUFFIX}"


def _with_partition_key(definition: str, key: str) -> str:
    """`PRIMARY KEY (id)` -> `PRIMARY KEY (id, created_at)`: a partitioned table's unique constraints
    must contain the partition key."""
    head, columns = definition.rsplit("(", 1)
    names = [column.strip() for column in columns.rstrip(")").split(",")]
    return definition if key in names else f"{head}({', '.join([*names, key])})"


def _twin_create(cursor: CursorWrapper, table: str, key: str, days: list[date]) -> None:
    twin = table + _TWIN_SUFFIX
    # Defaults, NOT NULL and CHECK constraints come with LIKE; the identity does not (until the swap the
    # twin only takes rows that have their id, and then gets a sequence that goes on where the table's
    # stopped), nor do keys and indexes, made below.
    cursor.execute(
        f"CREATE TABLE {_quote(twin)} (LIKE {_quote(table)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
        f"INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY RANGE ({_quote(key)})"
    )
    cursor.execute(f"CREATE TABLE {_quote(default_partition_name(twin))} PARTITION OF {_quote(twin)} DEFAULT")
    for name, _, definition in _constraints(cursor, table, "pu"):
        keyed = _with_partition_key(definition, key)
        cursor.execute(f"ALTER TABLE {_quote(twin)} ADD CONSTRAINT {_quote(_twin_name(name))} {keyed}")
    for name, _, definition in _constraints(cursor, table, "f"):
        cursor.execute(f"ALTER TABLE {_quote(twin)} ADD CONSTRAINT {_quote(name)} {definition}")
    for name, statement in _plain_indexes(cursor, table):
        on_table = re.compile(rf"^CREATE (UNIQUE )?INDEX {re.escape(name)} ON (ONLY )?(public\.)?{re.escape(table)} ")
        twin_statement, replaced = on_table.subn(rf"CREATE \g<1>INDEX {_twin_name(name)} ON {twin} ", statement)
        if not replaced:
            raise ValueError(f"unexpected index definition: {statement}")
        cursor.execute(twin_statement)
    for day in days:
        name = day_partition_name(twin, day)
        cursor.execute(f"CREATE TABLE {_quote(name)} PARTITION OF {_quote(twin)} {_day_bounds(day)}")


def _mirror_create(cursor: CursorWrapper, table: str, key: str) -> None:
    """Every write to the table from now on is made to the twin too, in the same transaction."""
    twin, key = _quote(table + _TWIN_SUFFIX), _quote(key)
    columns = _columns(cursor, table)
    assignments = ", ".join(f"{_quote(column)} = EXCLUDED.{_quote(column)}" for column in columns)
    function = _quote(f"{table}_mirror")
    cursor.execute(
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "  # noqa: S608
        f"IF TG_OP IN ('UPDATE', 'DELETE') THEN "
        f"DELETE FROM {twin} WHERE id = OLD.id AND {key} = OLD.{key}; END IF; "
        f"IF TG_OP IN ('INSERT', 'UPDATE') THEN "
        f"INSERT INTO {twin} SELECT NEW.* ON CONFLICT (id, {key}) DO UPDATE SET {assignments}; END IF; "
        f"RETURN NULL; END $$"
    )
    cursor.execute(
        f"CREATE TRIGGER {_quote(f'{table}_mirror')} AFTER INSERT OR UPDATE OR DELETE ON {_quote(table)} "
        f"FOR EACH ROW EXECUTE FUNCTION {function}()"
    )


def _copy_batches(
    table: str, key: str, *, batch_size: int, rest_per_work: float, progress: Callable[[int], None]
) -> int:
    """Copy the rows that predate the mirror, `batch_size` ids at a time, each batch its own transaction.

    FOR SHARE holds a batch's rows against a concurrent UPDATE or DELETE until the batch commits, so
    the mirror's change of a row always lands after the copy of it (and wins: the copy skips a row
    the mirror wrote first)."""
    twin = _quote(table + _TWIN_SUFFIX)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(max(id), 0) FROM {_quote(table)}")  # noqa: S608
        last_id = cursor.fetchone()[0]
    copied, start = 0, 0
    while start < last_id:
        began = time.monotonic()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {twin} SELECT * FROM {_quote(table)} WHERE id > %s AND id <= %s "  # noqa: S608
                f"FOR SHARE ON CONFLICT (id, {_quote(key)}) DO NOTHING",
                [start, start + batch_size],
            )
            copied += cursor.rowcount
        start += batch_size
        progress(copied)
        time.sleep((time.monotonic() - began) * rest_per_work)
    return copied


def _swap(cursor: CursorWrapper, table: str) -> None:
    """In one short transaction: the twin takes the table's name, keys, index names and sequence."""
    twin = table + _TWIN_SUFFIX
    cursor.execute(f"LOCK TABLE {_quote(table)} IN ACCESS EXCLUSIVE MODE")
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
    (sequence,) = cursor.fetchone()
    cursor.execute(f"SELECT last_value + 1 FROM {sequence}")  # noqa: S608
    (next_id,) = cursor.fetchone()
    renames = [name for name, _, _ in _constraints(cursor, table, "pu")]
    indexes = [name for name, _ in _plain_indexes(cursor, table)]
    cursor.execute(f"DROP TABLE {_quote(table)}")  # its mirror trigger and sequence with it
    cursor.execute(f"DROP FUNCTION IF EXISTS {_quote(f'{table}_mirror')}()")
    cursor.execute(f"ALTER TABLE {_quote(twin)} RENAME TO {_quote(table)}")
    for name in renames:
        cursor.execute(f"ALTER TABLE {_quote(table)} RENAME CONSTRAINT {_quote(_twin_name(name))} TO {_quote(name)}")
    for name in indexes:
        cursor.execute(f"ALTER INDEX {_quote(_twin_name(name))} RENAME TO {_quote(name)}")
    for partition in day_partitions(table):
        name = day_partition_name(table, partition.day)
        cursor.execute(f"ALTER TABLE {_quote(partition.name)} RENAME TO {_quote(name)}")
        _name_partition_indexes(cursor, name, f"p{partition.day:%Y%m%d}")
    default = default_partition_name(table)
    cursor.execute(f"ALTER TABLE {_quote(default_partition_name(twin))} RENAME TO {_quote(default)}")
    _name_partition_indexes(cursor, default, "default")
    cursor.execute(
        f"ALTER TABLE {_quote(table)} ALTER id ADD GENERATED BY DEFAULT AS IDENTITY "
        f"(SEQUENCE NAME {_quote(f'{table}_id_seq')} START WITH {int(next_id)})"
    )


def partition_table(
    table: str,
    *,
    days_ahead: int,
    key: str = DEFAULT_PARTITION_KEY,
    batch_size: int = 5000,
    rest_per_work: float = 0.0,
    progress: Callable[[int], None] = lambda copied: None,
) -> int:
    """Turn the plain `table` into one partitioned by day on `key`, online; returns the rows copied.

    Day partitions are made from the day of its oldest row to `days_ahead` days from today. Writes go
    on throughout: only the last step (the swap) locks the table, for as long as renaming takes.
    Between two copy batches it rests `rest_per_work` times as long as the batch took."""
    if is_partitioned(table):
        return 0
    with connection.cursor() as cursor:
        if referencing := _referencing(cursor, table):
            raise ValueError(f"{table}: foreign keys point into it ({', '.join(referencing)}); drop them first")
        # One scan, with no lock that blocks a write: a backdated row's day gets its partition too.
        cursor.execute(f"SELECT min({_quote(key)}) FROM {_quote(table)}")  # noqa: S608
        (oldest,) = cursor.fetchone()
    today = utc_today()
    first = min(oldest.astimezone(UTC).date(), today) if oldest else today
    days = [first + timedelta(days=offset) for offset in range((today - first).days + days_ahead + 1)]
    with transaction.atomic(), connection.cursor() as cursor:
        _twin_create(cursor, table, key, days)
        _mirror_create(cursor, table, key)
    copied = _copy_batches(table, key, batch_size=batch_size, rest_per_work=rest_per_work, progress=progress)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {_quote(table + _TWIN_SUFFIX)}")
    with transaction.atomic(), connection.cursor() as cursor:
        _swap(cursor, table)
    logger.info("partitions: %s is partitioned by day (%d row(s) copied)", table, copied)
    return copied


def _without_partition_key(definition: str, key: str) -> str:
    head, columns = definition.rsplit("(", 1)
    names = [column.strip() for column in columns.rstrip(")").split(",")]
    return f"{head}({', '.join(name for name in names if name != key)})"


def unpartition_table(table: str) -> None:
    """The way back (a migration reversed): the partitioned `table` becomes one plain table again, its
    keys without the partition key. It copies every row under lock: meant for test and development databases."""
    if not is_partitioned(table):
        return
    old = table + _TWIN_SUFFIX
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        (sequence,) = cursor.fetchone()
        cursor.execute(f"SELECT last_value + 1 FROM {sequence}")  # noqa: S608
        (next_id,) = cursor.fetchone()
        key = _partition_key(cursor, table)
        keys = _constraints(cursor, table, "pu")
        foreign = _constraints(cursor, table, "f")
        indexes = _plain_indexes(cursor, table)
        cursor.execute(f"ALTER TABLE {_quote(table)} RENAME TO {_quote(old)}")
        for name, _, _ in keys:
            cursor.execute(f"ALTER TABLE {_quote(old)} RENAME CONSTRAINT {_quote(name)} TO {_quote(_twin_name(name))}")
        for name, _ in indexes:
            cursor.execute(f"ALTER INDEX {_quote(name)} RENAME TO {_quote(_twin_name(name))}")
        cursor.execute(
            f"CREATE TABLE {_quote(table)} (LIKE {_quote(old)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING STORAGE INCLUDING COMMENTS)"
        )
        cursor.execute(f"INSERT INTO {_quote(table)} SELECT * FROM {_quote(old)}")  # noqa: S608
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"DROP TABLE {_quote(old)}")
        for name, _, definition in keys:
            cursor.execute(
                f"ALTER TABLE {_quote(table)} ADD CONSTRAINT {_quote(name)} {_without_partition_key(definition, key)}"
            )
        for name, _, definition in foreign:
            cursor.execute(f"ALTER TABLE {_quote(table)} ADD CONSTRAINT {_quote(name)} {definition}")
        for _, statement in indexes:
            cursor.execute(re.sub(r" ON ONLY ", " ON ", statement, count=1))
        cursor.execute(
            f"ALTER TABLE {_quote(table)} ALTER id ADD GENERATED BY DEFAULT AS IDENTITY "
            f"(SEQUENCE NAME {_quote(f'{table}_id_seq')} START WITH {int(next_id)})"
        )
