"""Mail as other MTAs send it to us: plain messages, RFC 3464 bounces and RFC 5965 complaints."""

from email import message_from_string
from email.message import Message as EmailMessage
from email.mime.base import MIMEBase
from email.mime.message import MIMEMessage
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.policy import compat32
from email.utils import formatdate, make_msgid

from messaging.models import Message
from messaging.verp import verp_local_part

RETURN_PATH_DOMAIN = "bounces.acme.example.com"


def wire_bytes(mail: EmailMessage) -> bytes:
    """The message as an MTA sends it: CRLF line ends."""
    return mail.as_bytes(policy=compat32.clone(linesep="\r\n"))


def verp_address(message: Message, recipient_index: int | None = None) -> str:
    """The return path of the recipient at `recipient_index`, or the per-message one of mail sent before those."""
    return f"{verp_local_part(message.public_id, recipient_index)}@{RETURN_PATH_DOMAIN}"


def plain_mail(*, sender: str, to: str, subject: str, text: str) -> EmailMessage:
    mail = MIMEText(text, "plain", "utf-8")
    mail["From"], mail["To"], mail["Subject"] = sender, to, subject
    mail["Date"], mail["Message-ID"] = formatdate(), make_msgid(domain="example.org")
    return mail


def _original_headers(message: Message) -> str:
    return (
        f"From: {message.from_address}\nTo: {', '.join(message.to)}\nSubject: {message.subject}\n"
        f"Message-ID: {message.message_id_header}\n"
    )


def dsn(
    *, message: Message, recipient: str, action: str = "failed", status: str = "5.1.1", original: bool = True
) -> EmailMessage:
    """A bounce as Postfix sends it: human-readable part, delivery-status, and the original's headers if `original`."""
    code = "550" if status.startswith("5") else "452"
    diagnostic = f"smtp; {code} {status} <{recipient}>: Recipient address rejected"
    report = MIMEMultipart("report", report_type="delivery-status")
    report["From"] = "MAILER-DAEMON@mx.example.org (Mail Delivery System)"
    report["To"] = verp_address(message)
    report["Subject"] = "Undelivered Mail Returned to Sender"
    report["Auto-Submitted"] = "auto-replied"
    report.attach(MIMEText(f"<{recipient}>: host mx.example.org said: {diagnostic[6:]}\n"))
    status_part = MIMEBase("message", "delivery-status")
    per_message = message_from_string("Reporting-MTA: dns; mx.example.org\n")
    per_recipient = message_from_string(
        f"Final-Recipient: rfc822; {recipient}\nAction: {action}\nStatus: {status}\nDiagnostic-Code: {diagnostic}\n"
    )
    status_part.set_payload([per_message, per_recipient])
    report.attach(status_part)
    if original:
        report.attach(MIMEText(_original_headers(message), "rfc822-headers"))
    return report


def global_dsn(*, message: Message, recipient: str, status: str = "5.1.1") -> bytes:
    """A Postfix SMTPUTF8 bounce (RFC 6533): message/global-delivery-status with raw UTF-8 fields."""
    boundary = "global-boundary"
    return (
        f"From: MAILER-DAEMON@mx.example.org (Mail Delivery System)\r\nTo: {verp_address(message)}\r\n"
        "Subject: Undelivered Mail Returned to Sender\r\nAuto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n"
        f'Content-Type: multipart/report; report-type=global-delivery-status; boundary="{boundary}"\r\n\r\n'
        f"--{boundary}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        f"<{recipient}>: host mx.example.org said: 550 {status} User unknown\r\n"
        f"--{boundary}\r\nContent-Type: message/global-delivery-status\r\n\r\n"
        "Reporting-MTA: dns; mx.example.org\r\n\r\n"
        f"Final-Recipient: utf-8; {recipient}\r\nOriginal-Recipient: utf-8; {recipient}\r\nAction: failed\r\n"
        f"Status: {status}\r\nDiagnostic-Code: smtp; 550 {status} User unknown\r\n"
        f"--{boundary}\r\nContent-Type: message/global-headers\r\n\r\n"
        f"{_original_headers(message)}"
        f"--{boundary}--\r\n"
    ).encode()


def arf(*, message: Message, recipient: str, to: str, original: bool = True) -> EmailMessage:
    """A feedback-loop complaint (RFC 5965) quoting the original message (unless not `original`)."""
    report = MIMEMultipart("report", report_type="feedback-report")
    report["From"], report["To"], report["Subject"] = "staff@feedback.example.net", to, "FW: complaint"
    report.attach(MIMEText("This is an email abuse report.\n"))
    feedback = MIMEBase("message", "feedback-report")
    feedback.set_payload(
        f"Feedback-Type: abuse\nUser-Agent: ExampleFBL/1.0\nVersion: 1\nOriginal-Rcpt-To: {recipient}\n"
    )
    report.attach(feedback)
    if original:
        copy = plain_mail(sender=message.from_address, to=recipient, subject=message.subject, text="Hello")
        del copy["Message-ID"]
        copy["Message-ID"] = message.message_id_header
        report.attach(MIMEMessage(copy))
    return report
