"""messaging's models, a module per concept; every model and its choices are importable from here
(`from messaging.models import Message`), as they were when this was one module.

- `messages.py`: messages and their events;
- `idempotency_keys.py`, `suppressions.py`: what a send is checked against;
- `counts.py`: the counts the dashboard and the readiness check read;
- `tls_reports.py`: the TLS reports this service sends;
- `aggregate_reports.py`: the DMARC and TLS reports it receives.
"""

from messaging.models.aggregate_reports import (
    AggregateKind,
    DmarcRecord,
    DmarcReport,
    ReportMail,
    ReportMailOutcome,
    TlsReport,
    TlsReportFailure,
)
from messaging.models.counts import (
    CountedEvent,
    DailyMessageCount,
    DailyStatusCount,
    HourlyStatusCount,
    StatusCount,
    StatusCountRollup,
)
from messaging.models.idempotency_keys import IdempotencyKey, IdempotencyState
from messaging.models.messages import (
    SUBMITTED,
    BounceType,
    Direction,
    EventRecord,
    EventType,
    Message,
    MessageEvent,
    RefusalReason,
    ReplyCause,
    Status,
    _message_public_id,
    message_by_public_id,
    public_id_condition,
)
from messaging.models.suppressions import Suppression, SuppressionReason
from messaging.models.tls_reports import TlsPolicyType, TlsReportStatus, TlsReportSubmission, TlsSessionCount

# _message_public_id: the default of Message.public_id, named by migrations 0001 and 0019.
__all__ = [
    "AggregateKind",
    "BounceType",
    "CountedEvent",
    "DailyMessageCount",
    "DailyStatusCount",
    "Direction",
    "DmarcRecord",
    "DmarcReport",
    "EventRecord",
    "EventType",
    "HourlyStatusCount",
    "IdempotencyKey",
    "IdempotencyState",
    "Message",
    "MessageEvent",
    "RefusalReason",
    "ReplyCause",
    "ReportMail",
    "ReportMailOutcome",
    "SUBMITTED",
    "Status",
    "StatusCount",
    "StatusCountRollup",
    "Suppression",
    "SuppressionReason",
    "TlsPolicyType",
    "TlsReport",
    "TlsReportFailure",
    "TlsReportStatus",
    "TlsReportSubmission",
    "TlsSessionCount",
    "_message_public_id",
    "message_by_public_id",
    "public_id_condition",
]
