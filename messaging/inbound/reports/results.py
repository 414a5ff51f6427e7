"""What `classify` returns: one outcome per recipient a report names."""

from dataclasses import dataclass, field
from enum import StrEnum


class ReportedOutcome(StrEnum):
    BOUNCE = "bounce"  # permanent failure: the recipient will not get it
    SOFT_BOUNCE = "soft_bounce"  # the relay gave up after temporary failures (4.x.x with a final action)
    DELAY = "delay"  # transient: the remote MTA is still trying
    COMPLAINT = "complaint"


@dataclass(frozen=True)
class RecipientReport:
    address: str  # lower-case bare address; "" when the report redacts it
    outcome: ReportedOutcome
    status: str = ""  # the enhanced status code, e.g. 5.1.1
    diagnostic: str = ""  # e.g. "smtp; 550 5.1.1 <a@example.org>: user unknown"
    feedback_type: str = ""  # complaints: the ARF Feedback-Type (abuse, opt-out, ...)

    @property
    def detail(self) -> str:
        return " ".join(part for part in (self.status, self.diagnostic) if part)


@dataclass(frozen=True)
class Report:
    recipients: list[RecipientReport] = field(default_factory=list)
    original_message_id: str = ""  # the Message-ID of the message reported on, if the report carries it
    original_return_path: str = ""  # its Return-Path as a complaint quotes it (bare address), if it does

    @property
    def kind(self) -> str:
        """complaint, bounce, soft_bounce, delay, or none (not a report we can act on)."""
        outcomes = {recipient.outcome for recipient in self.recipients}
        for outcome in (
            ReportedOutcome.COMPLAINT,
            ReportedOutcome.BOUNCE,
            ReportedOutcome.SOFT_BOUNCE,
            ReportedOutcome.DELAY,
        ):
            if outcome in outcomes:
                return outcome.value
        return "none"


NOT_A_REPORT = Report()
