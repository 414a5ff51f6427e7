"""parsedmarc's sample aggregate reports (real reporters' files, some broken) sent to the inbound server:
every report parsedmarc reads is stored, and dmarc_summary counts what parsedmarc counts.

The expected figures are tests/fixtures/reports/parsedmarc/parsedmarc-figures.json, written by a
one-off run of parsedmarc 11.1.0 from PyPI in a throwaway virtualenv (its README says how): parsedmarc
is not a test dependency, since it pulls in Elasticsearch, OpenSearch, Kafka, S3 and Graph clients.
A report sent twice by one reporter under one report id is stored once (one file repeats another's
reporter and id, as a resend would), so the figures are summed over distinct (reporter, report id).
"""

import io
import json
import smtplib
from collections import Counter
from collections.abc import Iterator
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path

import pytest
from django.core.management import call_command

from messaging.models import DmarcReport, ReportMail, ReportMailOutcome
from tests.dns_server import dns_server
from tests.factories import DomainFactory
from tests.harness import celery_worker, inbound_smtp_server, wait_until
from tests.harness.env import FAST_DISPATCH
from tests.inbound.mail import RETURN_PATH_DOMAIN, wire_bytes

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

SAMPLES = Path(__file__).parent.parent / "fixtures" / "reports" / "parsedmarc"
FIGURES = json.loads((SAMPLES / "parsedmarc-figures.json").read_text())
DMARC_TO = f"dmarc-reports@{RETURN_PATH_DOMAIN}"
# The samples date from 1979 to 2024: the test takes every period as recent enough.
EVERY_PERIOD_DAYS = 365 * 60


@pytest.fixture(scope="module")
def inbound(django_db_setup) -> Iterator[int]:
    # An empty zone on loopback: every DKIM key, SPF record and reverse name is answered as missing.
    with dns_server() as (_zone, address):
        env = {
            "MAILSERVICE_RETURN_PATH_DOMAIN": RETURN_PATH_DOMAIN,
            "MAILSERVICE_DNS_RESOLVER": address,
            "MAILSERVICE_REPORT_MAX_AGE_DAYS": str(EVERY_PERIOD_DAYS),
        }
        with inbound_smtp_server(**env) as port, celery_worker(beat=False, **env, **FAST_DISPATCH):
            yield port


def sample_mail(path: Path) -> bytes:
    """The file as its reporter mailed it: an .eml as it is, a report file as an attachment."""
    if path.suffix == ".eml":
        return path.read_bytes()
    mail = MIMEMultipart()
    mail["From"], mail["To"], mail["Subject"] = "reports@reporter.example", DMARC_TO, f"Report {path.name}"
    mail.attach(MIMEText("An aggregate report.", "plain"))
    subtype = {".gz": "gzip", ".zip": "zip"}.get(path.suffix, "xml")
    mail.attach(MIMEApplication(path.read_bytes(), subtype, name=path.name))
    return wire_bytes(mail)


def expected(domain: str) -> dict[str, int]:
    """parsedmarc's figures for `domain`, each (reporter, report id) once."""
    totals: Counter[str] = Counter()
    seen = set()
    for figures in FIGURES.values():
        key = (figures["org_name"], figures["report_id"])
        if figures["domain"] != domain or key in seen:
            continue
        seen.add(key)
        totals["reports"] += 1
        for name in ("messages", "dmarc_pass", "dkim_aligned", "spf_aligned"):
            totals[name] += figures[name]
    return dict(totals)


def summary(domain: str) -> dict[str, int]:
    out = io.StringIO()
    days = str(EVERY_PERIOD_DAYS)
    call_command("dmarc_summary", domain, "--days", days, "--include-unauthenticated", "--json", stdout=out)
    found = json.loads(out.getvalue())
    return {
        "reports": found["reports"],
        "messages": found["messages"],
        "dmarc_pass": found["dmarc_pass"],
        "dkim_aligned": found["dkim_aligned_pass"],
        "spf_aligned": found["spf_aligned_pass"],
    }


def test_every_report_parsedmarc_reads_is_stored_and_summed_as_parsedmarc_sums_it(inbound):
    domains = sorted({figures["domain"] for figures in FIGURES.values()})
    for name in domains:
        DomainFactory(name=name)
    assert len(FIGURES) == 19  # parsedmarc read every sample file
    with smtplib.SMTP("127.0.0.1", inbound, timeout=30) as smtp:
        for name in FIGURES:
            assert smtp.sendmail("reports@reporter.example", [DMARC_TO], sample_mail(SAMPLES / name)) == {}, name
    wait_until(
        lambda: ReportMail.objects.exclude(outcome=ReportMailOutcome.RECEIVED).count() == len(FIGURES),
        timeout=60,
        message="every sample read",
    )
    refused = dict(ReportMail.objects.filter(outcome=ReportMailOutcome.REFUSED).values_list("subject", "reason"))
    assert refused == {}
    assert DmarcReport.objects.count() == len({(f["org_name"], f["report_id"]) for f in FIGURES.values()})
    for name in domains:
        assert summary(name) == expected(name), name
