"""What the SMTP submission server does: authenticate a key, check a sender, store a submitted message.

The rules are POST /v1/send's (messaging.services.send_permitted and message_store), in the same
order, raising the same ApiErrors; the server translates them into SMTP replies. The message is
stored as submitted (`raw`) with its envelope (`envelope_from`, `envelope_recipients`, who alone
receive it), and with the fields the API lists: From, To, Cc and Subject from the header, the
text/plain part as `text`. Dispatch sends the stored MIME (messaging.rfc5322.submitted.submitted_wire).
A test key's message is a test message, as over HTTP: stored `is_test`, never handed to the relay,
its outcome simulated (messaging/outbound/sandbox.py), no allowance counted, read only by test keys.
"""

from dataclasses import dataclass

from django.utils import timezone

from apikeys.models import ApiKey, Permission
from apikeys.services import apikey_authenticate
from mailservice.errors import ErrorCode, PermissionDenied
from messaging.feedback_id import feedback_id
from messaging.models import Direction, Message, Status
from messaging.rfc5322.parsing import body_text, parse_bytes, storable
from messaging.rfc5322.submitted_headers import parse_submitted, refuse_bare_line_breaks
from messaging.services import message_store, send_permitted

USER_NAME = b"apikey"


@dataclass(frozen=True)
class Submitter:
    """Who authenticated on an SMTP session: the key's id, re-read for every message (it may be revoked)."""

    api_key_id: int


def submission_authenticate(*, login: bytes, password: bytes) -> Submitter | None:
    """The user name `apikey` and an active API key with email.send as the password, else None.

    The key is checked as the API checks a bearer key (prefix lookup, constant-time digest compare)
    whatever the user name, so a wrong user name costs the same time as a wrong key."""
    try:
        raw_key = password.decode("ascii")
    except UnicodeDecodeError:
        raw_key = ""
    api_key = apikey_authenticate(raw_key=raw_key)
    if api_key is None or login != USER_NAME or not api_key.has_permission(Permission.SEND):
        return None
    return Submitter(api_key_id=api_key.pk)


def _key_of(submitter: Submitter) -> ApiKey:
    """The key as it is now, with its domain; a key revoked (or stripped of email.send) since AUTH is refused."""
    api_key = ApiKey.objects.select_related("domain").filter(pk=submitter.api_key_id, revoked_at=None).first()
    if api_key is None or not api_key.has_permission(Permission.SEND):
        raise PermissionDenied("The API key was revoked since AUTH", code=ErrorCode.MISSING_PERMISSION)
    return api_key


def submission_sender_check(*, submitter: Submitter, envelope_from: str) -> None:
    """MAIL FROM: the envelope sender on the key's domain, the domain verified and not paused."""
    send_permitted(domain=_key_of(submitter).domain, from_address=envelope_from)


def submission_accept(*, submitter: Submitter, envelope_from: str, recipients: list[str], raw: bytes) -> Message:
    """DATA: store the submitted message as `accepted`, after POST /v1/send's checks, or raise.

    The header From must be on the key's domain like the envelope sender, and every line ends with
    CRLF. Nothing is stored when a check fails; dispatch starts once the row is committed."""
    api_key = _key_of(submitter)
    domain = api_key.domain
    refuse_bare_line_breaks(raw)
    headers = parse_submitted(raw)
    send_permitted(domain=domain, from_address=envelope_from)
    send_permitted(domain=domain, from_address=headers.from_address)
    text = body_text(parse_bytes(raw))
    message = Message(
        domain=domain,
        direction=Direction.SENT,
        status=Status.ACCEPTED,
        from_address=headers.from_address,
        to=headers.to,
        cc=headers.cc,
        subject=headers.subject,
        # The wire's CRLF line breaks are not part of the text.
        text=storable(text.replace("\r\n", "\n")) if text is not None else None,
        envelope_from=envelope_from,
        envelope_recipients=recipients,
        raw=raw,
        next_attempt_at=timezone.now(),
        is_test=api_key.is_test,
        feedback_id=feedback_id(template_slug=None, api_key_name=api_key.name, domain_name=domain.name),
    )
    message.message_id_header = headers.message_id[:255] or f"<{message.public_id}@{domain.name}>"
    return message_store(domain=domain, message=message)
