"""Test keys' mail: never handed to SMTP; dispatch records the outcome the recipients ask for.

`delivered@simulator.test` is delivered, `bounced@simulator.test` bounces hard,
`softbounce@simulator.test` bounces soft, `complained@simulator.test` is delivered and then
complained about; any other recipient is delivered. The outcome goes through dispatch's own
recording (the same statuses, events, leases and webhooks as live mail), so an integration test
sees what production would.
"""

from messaging.models import BounceType, EventRecord, EventType, Status
from messaging.outbound.envelope import Reply
from messaging.refusals import classify_refusal

SIMULATOR_DOMAIN = "simulator.test"
# The replies a relay would give, recorded as it would record them (its detail: the reply itself).
DELIVERED = Reply(250, "2.0.0 OK: simulated delivery (test key)")
HARD_BOUNCE = Reply(550, "5.1.1 simulated hard bounce: no such mailbox (test key)")
SOFT_BOUNCE = Reply(452, "4.2.2 simulated soft bounce: mailbox full (test key)")


def _simulated(kind: str, address: str, reply: Reply, bounce_type: str = "") -> EventRecord:
    # The simulated failures are about mailboxes: their reason never names a domain's check to fix.
    verdict = classify_refusal(reply.code, reply.enhanced_status, reply.text)
    return EventRecord(
        kind,
        address,
        f"{reply}{verdict.note(domain=SIMULATOR_DOMAIN)}",
        smtp_code=reply.code,
        enhanced_status=reply.enhanced_status,
        diagnostic=reply.text,
        bounce_type=bounce_type,
        cause=verdict.cause,
        fix_check=verdict.check,
        reason=verdict.reason,
    )


def _events(address: str) -> list[EventRecord]:
    local, _, domain = address.lower().rpartition("@")
    wanted = local if domain == SIMULATOR_DOMAIN else "delivered"
    if wanted == "bounced":
        return [_simulated(EventType.BOUNCED, address, HARD_BOUNCE, BounceType.HARD)]
    if wanted == "softbounce":
        return [_simulated(EventType.SOFT_BOUNCED, address, SOFT_BOUNCE, BounceType.SOFT)]
    if wanted == "complained":
        complaint = EventRecord(EventType.COMPLAINED, address, "feedback-type: abuse", feedback_type="abuse")
        return [_simulated(EventType.DELIVERED, address, DELIVERED), complaint]
    return [_simulated(EventType.DELIVERED, address, DELIVERED)]


def sandbox_outcome(*, recipients: list[str]) -> tuple[str, list[EventRecord]]:
    """The message's final status and its events for these envelope recipients (bare addresses)."""
    events = [event for address in recipients for event in _events(address)]
    kinds = {event.type for event in events}
    if EventType.DELIVERED not in kinds:
        # As a report would leave it: bounced once a recipient bounced hard; a relay that gave up on
        # temporary failures alone leaves the message failed, its recipients unsuppressed.
        return (Status.BOUNCED if EventType.BOUNCED in kinds else Status.FAILED), events
    return (Status.COMPLAINED if EventType.COMPLAINED in kinds else Status.DELIVERED), events
