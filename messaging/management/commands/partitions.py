from typing import Any

from django.core.management.base import CommandError

from mailservice import partitions
from mailservice.commands import ServiceCommand
from messaging.partitioning import DAYS_AHEAD, history_partitions_ensure, history_tables
from messaging.retention import held_partitions


class Command(ServiceCommand):
    help = (
        "PostgreSQL: make the day partitions of the message history (and webhook deliveries) up to "
        f"{DAYS_AHEAD} days ahead and list them, "
        "with those kept past retention for messages still accepted. The retention task does the same "
        "(and drops the expired days) every MAILSERVICE_RETENTION_PURGE_INTERVAL seconds."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if not partitions.available():
            raise CommandError("history is partitioned on PostgreSQL only; SQLite keeps plain tables")
        for name in history_partitions_ensure():
            self.stdout.write(f"created {name}")
        for table in history_tables():
            if not partitions.is_partitioned(table):
                self.stdout.write(f"{table}: not partitioned yet (run manage.py partition_history)")
                continue
            days = partitions.day_partitions(table)
            span = f"{days[0].day} to {days[-1].day}" if days else "none"
            self.stdout.write(f"{table}: {len(days)} day partition(s), {span}, and the DEFAULT partition")
        for name in held_partitions():
            self.stdout.write(f"{name}: past retention, kept: it holds messages still accepted")
