"""Test keys' mail: never handed to SMTP; dispatch records the outcome the recipients ask for.

`delivered@simulator.test` is delivered, `bounced@simulator.test` bounces hard,
`softbounce@simulator.test` bounces soft, `complained@simulator.test` is delivered and then
complained about; any other recipient is delivered. The outcome goes through dispatch's own
recording (the same statuses, events, leases and webhooks as live mail), so an integration test
sees what production would.
"""

from messaging.models import EventType, Status

SIMULATOR_DOMAIN = "simulator.test"
DELIVERED = "250 2.0.0 OK: simulated delivery (test key)"
HARD_BOUNCE = "550 5.1.1 simulated hard bounce: no such mailbox (test key)"
SOFT_BOUNCE = "452 4.2.2 simulated soft bounce: mailbox full (test key)"
COMPLAINT = "feedback-type: abuse"

Event = tuple[str, str, str]  # (type, recipient, detail), as dispatch records them


def _events(address: str) -> list[Event]:
    local, _, domain = address.lower().rpartition("@")
    wanted = local if domain == SIMULATOR_DOMAIN else "delivered"
    if wanted == "bounced":
        return [(EventType.BOUNCED, address, HARD_BOUNCE)]
    if wanted == "softbounce":
        return [(EventType.SOFT_BOUNCED, address, SOFT_BOUNCE)]
    if wanted == "complained":
        return [(EventType.DELIVERED, address, DELIVERED), (EventType.COMPLAINED, address, COMPLAINT)]
    return [(EventType.DELIVERED, address, DELIVERED)]


def sandbox_outcome(*, recipients: list[str]) -> tuple[str, list[Event]]:
    """The message's final status and its events for these envelope recipients (bare addresses)."""
    events = [event for address in recipients for event in _events(address)]
    kinds = {kind for kind, _, _ in events}
    if EventType.DELIVERED not in kinds:
        # As a report would leave it: bounced once a recipient bounced hard; a relay that gave up on
        # temporary failures alone leaves the message failed, its recipients unsuppressed.
        return (Status.BOUNCED if EventType.BOUNCED in kinds else Status.FAILED), events
    return (Status.COMPLAINED if EventType.COMPLAINED in kinds else Status.DELIVERED), events
