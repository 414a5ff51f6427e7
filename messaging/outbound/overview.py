"""The console's Destinations page: which way mail leaves, and the limits it leaves within.

It sits above the relay's and direct delivery's limits and only reads them: each figure comes from
the module that keeps it in the state the fleet shares (fleet_limits.py, domain_holds.py, direct/destinations.py),
with that module's answer when Redis is unreachable. Nothing here writes.
"""

from dataclasses import dataclass

from django.conf import settings

from messaging.outbound.direct.destinations import destination_list
from messaging.outbound.domain_holds import held_destinations
from messaging.outbound.fleet_limits import relay_rate_status
from messaging.outbound.transports import delivery_mode, is_direct_delivery


@dataclass(frozen=True)
class DestinationOverview:
    """The console's Destinations page: where mail goes and the limits it goes within."""

    mode: str  # delivery_mode(), in words
    direct: bool  # EMAIL_URL=mx://: the destinations below; else the relay is the one destination
    relay: dict  # relay_rate_status()
    destinations: list[dict]  # destination_list(): name, MX hosts, rate, connections, last error
    held: dict[str, dict]  # held_destinations(): the recipient domains held now


def destination_overview() -> DestinationOverview:
    """The selector of the console's Destinations page: every destination used in the last day with
    its MX hosts, connections in use, rate in force and why, and last error; the held recipient
    domains; the relay's limits in relay mode."""
    return DestinationOverview(
        mode=delivery_mode(),
        direct=is_direct_delivery(settings.EMAIL_URL or ""),
        relay=relay_rate_status(),
        destinations=destination_list(),
        held=held_destinations(),
    )
