from typing import Any

from django.core.management.base import CommandError, CommandParser

from mailservice import partitions
from mailservice.commands import ServiceCommand, positive_int
from messaging.partitioning import history_partition, history_tables


class Command(ServiceCommand):
    help = (
        "PostgreSQL: partition the message history by day (messages, events, then webhook deliveries) while "
        "the service runs: each table's partitioned twin is filled in short batches while a trigger mirrors "
        "every write, then takes the table's name in one short transaction. Run it once after upgrading an "
        "installation whose tables already had rows (migrate says so); a table already partitioned is skipped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=positive_int, default=5000, help="rows a copy batch takes by id")
        parser.add_argument(
            "--rest", type=float, default=1.0, help="rest between batches, as a multiple of the last batch's time"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not partitions.available():
            raise CommandError("history is partitioned on PostgreSQL only; SQLite keeps plain tables")
        for table in history_tables():
            if partitions.is_partitioned(table):
                self.stdout.write(f"{table}: already partitioned")
                continue
            self.stdout.write(f"{table}: copying into its partitioned twin")

            def progress(rows: int, table: str = table) -> None:
                self.stdout.write(f"{table}: {rows} row(s) copied")

            copied = history_partition(
                table, batch_size=options["batch_size"], rest_per_work=options["rest"], progress=progress
            )
            self.stdout.write(f"{table}: partitioned by day ({copied} row(s) copied)")
