import argparse
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandParser

from mailservice.commands import ServiceCommand
from webhooks.models import EventType
from webhooks.replay import webhooks_replay
from webhooks.services import endpoint_get


def _moment(value: str) -> datetime:
    """ISO 8601; without an offset it is UTC."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date-time like 2026-12-04T10:00:00Z") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class Command(ServiceCommand):
    help = (
        "Send a webhook endpoint every event of its domain in a window again, with their original webhook-id, "
        "through the normal delivery path (the webhooks worker sends them)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("endpoint", help="The endpoint's id (whk_…), as list_webhooks shows it")
        parser.add_argument("--since", required=True, type=_moment, help="Events created at or after, ISO 8601 (UTC)")
        parser.add_argument("--until", type=_moment, help="Events created before (default: now)")
        parser.add_argument(
            "--type",
            action="append",
            choices=EventType.values,
            dest="types",
            help="Only this event type; repeat for several (default: every type the endpoint takes)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        endpoint = endpoint_get(public_id=options["endpoint"])
        queued = webhooks_replay(
            endpoint=endpoint, since=options["since"], until=options["until"], event_types=options["types"] or []
        )
        self.stdout.write(f"Queued {queued} deliveries to {endpoint.public_id} again")
