"""The OpenAPI document's `webhooks` section (OpenAPI 3.1): one entry per event type, its JSON body.

Only documentation: payloads are built by webhooks/payloads.py; tests/webhooks check both agree.
"""

from typing import Any

from drf_spectacular.utils import OpenApiResponse, OpenApiWebhook, extend_schema
from rest_framework import serializers

from mailservice.api.serializers import MessageSerializer
from messaging.models import RefusalReason, ReplyCause
from messaging.refusals import FIX_CHECKS
from webhooks.models import EventType

SIGNATURE_NOTE = (
    "Signed per Standard Webhooks: headers `webhook-id` (the event id, the same on every retry), "
    "`webhook-timestamp` and `webhook-signature` (`v1,<base64 HMAC-SHA256>`, space-separated during a "
    "secret rotation). Verify with the `standardwebhooks` library and the endpoint's `whsec_` secret. "
    "Answer 2xx within 10 s; anything else is retried (after ~5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h)."
)


class EmailEventData(MessageSerializer):
    """The message as GET /v1/messages/{id} shows it (text null), status as of the event, plus the event's fields."""

    recipient = serializers.CharField(required=False, help_text="The recipient the event is about, if about one")


class EmailSmtpEventData(EmailEventData):
    status_code = serializers.CharField(required=False, help_text="Enhanced status code, e.g. 5.1.1")
    diagnostic = serializers.CharField(required=False, help_text="What the remote side or the service said")
    smtp_response = serializers.CharField(required=False, help_text="The SMTP reply, e.g. `250 2.0.0 OK`")


class EmailFailureData(EmailSmtpEventData):
    reason = serializers.ChoiceField(
        choices=RefusalReason.values,
        required=False,
        help_text="Why the receiver deferred or refused it, as an application acts on it (docs/webhooks.md): "
        "user_unknown, mailbox_disabled and domain_not_found suppress the address (remove it); mailbox_full, "
        "rate_limited, greylisted, host_unreachable and expired are worth another try later; blocked, "
        "spam_detected, authentication and policy are the sender's to fix; content_rejected (size, virus, "
        "attachment); other",
    )
    cause = serializers.ChoiceField(
        choices=ReplyCause.values,
        required=False,
        help_text="Kept for compatibility, derived from `reason`: authentication, reputation (blocked, "
        "spam_detected), rate_limited, policy, mailbox (the address or mailbox), other",
    )
    fix_check = serializers.ChoiceField(
        choices=FIX_CHECKS,
        required=False,
        help_text="With cause authentication: the readiness check to fix (`manage.py check_readiness DOMAIN`)",
    )


class EmailBouncedData(EmailFailureData):
    bounce_type = serializers.ChoiceField(choices=["hard", "soft"], help_text="hard: permanent (5.x.x); soft: 4.x.x")


class EmailComplainedData(EmailEventData):
    feedback_type = serializers.CharField(required=False, help_text="The ARF Feedback-Type, e.g. abuse")


class ReceivedHeader(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.CharField()


class ReceivedAttachment(serializers.Serializer):
    filename = serializers.CharField(allow_null=True)
    content_type = serializers.CharField()
    size = serializers.IntegerField(help_text="Bytes, transfer encoding undone")
    content_id = serializers.CharField(allow_null=True)
    url = serializers.CharField(help_text="getMessageAttachment with its expiring token; needs the API key")


class EmailReceivedData(EmailEventData):
    cc = serializers.ListField(child=serializers.CharField())
    html = serializers.CharField(allow_null=True)
    headers = ReceivedHeader(many=True, help_text="Every header, in order, decoded")
    attachments = ReceivedAttachment(many=True)
    raw_url = serializers.CharField(help_text="getMessageRaw with its expiring token; needs the API key")


class DmarcReportSource(serializers.Serializer):
    source_ip = serializers.CharField()
    messages = serializers.IntegerField()
    dmarc_pass = serializers.IntegerField(help_text="Messages that passed DMARC (DKIM or SPF aligned)")


class DmarcReportData(serializers.Serializer):
    """One DMARC aggregate report about the domain, counted as `manage.py dmarc_summary` counts (messages)."""

    domain = serializers.CharField()
    org_name = serializers.CharField(help_text="The reporter, as it names itself")
    report_id = serializers.CharField()
    authenticated = serializers.BooleanField(
        help_text="Its mail was DKIM- or SPF-aligned with the reporter's domain; anyone can mail a report that is not"
    )
    begin = serializers.DateTimeField()
    end = serializers.DateTimeField()
    messages = serializers.IntegerField()
    dmarc_pass = serializers.IntegerField()
    dkim_aligned_pass = serializers.IntegerField()
    spf_aligned_pass = serializers.IntegerField()
    sources = DmarcReportSource(many=True)


_DATA: dict[str, type[serializers.Serializer]] = {
    EventType.ACCEPTED: EmailEventData,
    EventType.DELIVERED: EmailSmtpEventData,
    EventType.DELAYED: EmailFailureData,
    EventType.BOUNCED: EmailBouncedData,
    EventType.COMPLAINED: EmailComplainedData,
    EventType.FAILED: EmailFailureData,
    EventType.SUPPRESSED: EmailSmtpEventData,
    EventType.RECEIVED: EmailReceivedData,
    EventType.DMARC_REPORT: DmarcReportData,
}

_SUMMARY: dict[str, str] = {
    EventType.ACCEPTED: "A send was stored and will be dispatched",
    EventType.DELIVERED: "The relay accepted the message (one event per message, or per recipient for test keys)",
    EventType.DELAYED: (
        "A receiver deferred the message (dispatch retries) or a DSN reported a delay;"
        " at most one per message per MAILSERVICE_DELAYED_EVENT_INTERVAL, none for the service's own put-backs"
    ),
    EventType.BOUNCED: "A recipient was refused (dispatch 5xx) or a bounce (DSN) came back",
    EventType.COMPLAINED: "A recipient reported the message as spam (ARF feedback loop)",
    EventType.FAILED: "Dispatch gave up on the message",
    EventType.SUPPRESSED: "A recipient was skipped: it is on the domain's suppression list",
    EventType.RECEIVED: "Mail arrived for the domain",
    EventType.DMARC_REPORT: "A receiver's DMARC aggregate report about the domain was stored (once per report id)",
}


def _event_serializer(event_type: str) -> serializers.Serializer:
    name = "".join(part.capitalize() for part in event_type.split("."))
    fields: dict[str, Any] = {
        "type": serializers.ChoiceField(choices=[event_type]),
        "id": serializers.CharField(help_text="The event id (evt_…), the same in every retry: deduplicate on it"),
        "created_at": serializers.DateTimeField(),
        "test": serializers.BooleanField(
            help_text="true for messages sent with a test key (always false for domain.*)"
        ),
        "data": _DATA[event_type](),
    }
    return type(f"{name}EventSerializer", (serializers.Serializer,), fields)()


def _webhook(event_type: str) -> OpenApiWebhook:
    return OpenApiWebhook(
        name=event_type,
        decorator=extend_schema(
            summary=_SUMMARY[event_type],
            description=SIGNATURE_NOTE,
            request=_event_serializer(event_type),
            responses={200: OpenApiResponse(description="Any 2xx: received")},
        ),
    )


# SPECTACULAR_SETTINGS["WEBHOOKS"] names each of these.
EMAIL_ACCEPTED = _webhook(EventType.ACCEPTED.value)
EMAIL_DELIVERED = _webhook(EventType.DELIVERED.value)
EMAIL_DELAYED = _webhook(EventType.DELAYED.value)
EMAIL_BOUNCED = _webhook(EventType.BOUNCED.value)
EMAIL_COMPLAINED = _webhook(EventType.COMPLAINED.value)
EMAIL_FAILED = _webhook(EventType.FAILED.value)
EMAIL_SUPPRESSED = _webhook(EventType.SUPPRESSED.value)
EMAIL_RECEIVED = _webhook(EventType.RECEIVED.value)
DOMAIN_DMARC_REPORT = _webhook(EventType.DMARC_REPORT.value)
