"""Issue 42's cost goal: a 1 MB hostile bounce report is parsed and every recipient's refusal classified
within 0.2 s of CPU (messaging/inbound/reports/, messaging/refusals.py read bounded regions only). The
figure is printed in the terminal summary (tests/inbound/conftest.py)."""

import time

import pytest

from messaging.inbound.reports import classify
from messaging.inbound.services import report_verdict
from messaging.models import RefusalReason

SIZE = 1024 * 1024
FILLER = ("5.7.1 " + "a" * 70 + " spamhaus whitelist user unknown <b@example.org>\r\n") * (SIZE // 110)
DSN = (
    "From: MAILER-DAEMON@mx.example.org\r\nTo: bounces@example.com\r\nSubject: Undelivered Mail\r\n"
    'MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status; boundary="b"\r\n\r\n'
    f"--b\r\nContent-Type: text/plain\r\n\r\n{FILLER}\r\n"
    "--b\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.org\r\n\r\n"
    f"Final-Recipient: rfc822; a@example.org\r\nAction: failed\r\nStatus: 5.0.0\r\n"
    f"Diagnostic-Code: smtp; 550 {'x' * (SIZE // 2)}\r\n--b--\r\n"
)
# A plain-text bounce: the notice's words about the address are what the classifier reads.
PLAIN = (
    "From: MAILER-DAEMON@mx.example.org\r\nTo: bounces@example.com\r\nSubject: Mail delivery failed\r\n\r\n"
    f"<a@example.org>: {'blocked ' * (SIZE // 16)}\r\n{FILLER}"
)


@pytest.mark.parametrize("raw", [DSN.encode(), PLAIN.encode()], ids=["dsn", "plain-text"])
def test_a_hostile_megabyte_report_is_classified_within_the_cpu_budget(raw, record_property, request):
    """Issue 42's goal: <= 0.2 s of CPU for a 1 MB hostile report, parse and verdict together."""
    assert len(raw) >= SIZE
    started = time.process_time()
    report = classify(raw)
    verdicts = [report_verdict(recipient) for recipient in report.recipients]
    spent = time.process_time() - started
    kind = request.node.callspec.id
    record_property(f"figure: CPU to parse and classify a 1 MB hostile report ({kind})", f"{spent:.3f} s")
    assert verdicts and all(verdict.reason in RefusalReason.values for verdict in verdicts)
    assert spent <= 0.2, f"{spent:.3f} s CPU"
